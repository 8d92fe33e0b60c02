//! Hostile RESP: memshift answers what Redis answers (the same bytes, then
//! the same close), and a huge declared length costs nothing until the
//! bytes arrive.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use memshift_tests::{on_both, require_tools, send_and_read, RedisServer, RespCluster};

/// What a server answers to `input` on a fresh connection, and whether it
/// closed the connection.
fn exchange(port: u16, input: &[u8]) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    // Long enough for a loaded box; the reply comes at once.
    send_and_read(&mut s, input, Duration::from_secs(3))
}

#[test]
fn hostile_requests_get_redis_errors() {
    if !require_tools("hostile_requests_get_redis_errors", &["redis-server"]) {
        return;
    }
    let cluster = RespCluster::start();
    let plain = RedisServer::start();
    let mut nested = Vec::new();
    for _ in 0..10_000 {
        nested.extend_from_slice(b"*1\r\n");
    }
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("1 GB declared bulk", b"*1\r\n$1073741824\r\n".to_vec()),
        (
            "bulk length over 512 MB",
            b"*2\r\n$3\r\nGET\r\n$536870913\r\n".to_vec(),
        ),
        ("negative bulk length", b"*1\r\n$-3\r\n".to_vec()),
        ("bulk length not a number", b"*1\r\n$abc\r\n".to_vec()),
        ("deep nesting", nested),
        ("multibulk count not a number", b"*x\r\n".to_vec()),
        ("inline line over 64 KB", vec![b'a'; 70 * 1024]),
        ("unbalanced quotes", b"SET a \"b\r\n".to_vec()),
        (
            "empty requests are skipped",
            b"*0\r\n*-1\r\n\r\nPING\r\n".to_vec(),
        ),
        (
            "inline commands",
            b"SET inl 1\r\nGET inl\r\nDEL inl\r\n".to_vec(),
        ),
        (
            "pipelined requests after an error",
            b"PING\r\n*1\r\n*1\r\nPING\r\n".to_vec(),
        ),
    ];
    for (what, input) in &cases {
        let (want, got) = on_both(plain.port(), cluster.resp_port, |port| {
            exchange(port, input)
        });
        assert_eq!(
            got,
            want,
            "{what}: memshift {:?} vs redis {:?}",
            String::from_utf8_lossy(&got.0),
            String::from_utf8_lossy(&want.0)
        );
    }
    // memshift's one limit tighter than Redis 7's (documented): at most
    // 1,048,576 arguments (Redis 6's limit), so a request's argument list
    // stays bounded.
    assert_eq!(
        exchange(cluster.resp_port, b"*1048577\r\n"),
        (
            b"-ERR Protocol error: invalid multibulk length\r\n".to_vec(),
            true
        )
    );
    // memshift still serves.
    let (reply, _) = exchange(cluster.resp_port, b"PING\r\n");
    assert_eq!(reply, b"+PONG\r\n");
}

/// `VmRSS` (resident) or `VmSize` (virtual: a reserved but untouched
/// buffer shows here) of a process, in KiB.
fn mem_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS/VmSize")
}

#[test]
fn declared_lengths_are_not_allocated() {
    if !require_tools("declared_lengths_are_not_allocated", &["redis-server"]) {
        return;
    }
    let cluster = RespCluster::start();
    let pid = cluster.memshift.pid().expect("memshift pid");
    let (rss_before, virt_before) = (mem_kib(pid, "VmRSS:"), mem_kib(pid, "VmSize:"));
    // 20 connections each declaring a 512 MB value (the largest allowed):
    // 10 GB if memshift reserved what is declared.
    let mut conns = Vec::new();
    for _ in 0..20 {
        let mut s = cluster.raw();
        s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\npartial data")
            .expect("write");
        conns.push(s);
    }
    // Every connection's header has been read once PING on a new one
    // (accepted after them) is answered... give the reads time on a loaded
    // box, then look.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut p = cluster.raw();
    let (reply, _) = send_and_read(&mut p, b"PING\r\n", Duration::from_secs(10));
    assert_eq!(reply, b"+PONG\r\n");
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (rss, virt) = (mem_kib(pid, "VmRSS:"), mem_kib(pid, "VmSize:"));
    assert!(
        rss < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss} KiB for declared (not sent) values"
    );
    assert!(
        virt < virt_before + 1024 * 1024,
        "virtual size grew from {virt_before} KiB to {virt} KiB: declared lengths were reserved"
    );
    // The connections wait for their data; none was answered or closed.
    for s in &mut conns {
        let (reply, closed) = send_and_read(s, b"", Duration::from_millis(200));
        assert!(
            reply.is_empty() && !closed,
            "a waiting request was answered: {reply:?}"
        );
    }
}

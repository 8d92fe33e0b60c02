//! Pub/sub on the RESP port (3 shards, the first carrying the channel
//! space), compared with one plain Redis: redis-py's PubSub in RESP2 and
//! RESP3, raw bytes of the subscribed state; and its faults: the
//! subscriber's shard killed (an error, then the close), a subscriber that
//! never reads (closed as a slow consumer, memory bounded), the bound on
//! subscriber connections. Cluster mode: `pubsub_cluster.rs`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use memshift_tests::ops_support::{metric, vm_rss_kib, wait_until};
use memshift_tests::resp_proxy::{on_both, send_and_read, start_resp_memshift};
use memshift_tests::{require_tools, RedisServer, Resp, RespCluster};

use super::clients::same_redis_py_output;

const PUBSUB_PY: &str = include_str!("pubsub.py");
const POLL: Duration = Duration::from_millis(50);
const SUBSCRIBERS: &str = "memshift_resp_subscriber_connections";

#[test]
fn pubsub_redis_py_matches_plain_redis() {
    if !require_tools(
        "pubsub_redis_py_matches_plain_redis",
        &["python3", "redis-server"],
    ) {
        return;
    }
    let cluster = RespCluster::start();
    for out in same_redis_py_output(&cluster, PUBSUB_PY) {
        assert!(out.contains("'data': b'payload 19'"), "{out}");
    }
    // Every subscriber connection is closed once its client is.
    wait_until(
        Duration::from_secs(10),
        POLL,
        "subscriber connections closed",
        || (metric(cluster.admin_port, SUBSCRIBERS) == 0.0).then_some(()),
    );
}

/// Requests in the subscribed state, sent in steps; what each server wrote.
fn subscribed_session(port: u16, resp3: bool) -> Vec<u8> {
    const STEPS: &[&[u8]] = &[
        b"SUBSCRIBE a\r\n",
        b"GET x\r\nPING\r\nPING hi\r\nECHO e\r\n",
        b"PSUBSCRIBE p*\r\nUNSUBSCRIBE b\r\nUNSUBSCRIBE\r\nPING\r\nPUNSUBSCRIBE\r\n",
        b"UNSUBSCRIBE\r\nPUNSUBSCRIBE q\r\nSUNSUBSCRIBE x\r\nPING\r\n",
        b"SUBSCRIBE a b a\r\nUNSUBSCRIBE a b\r\nSUBSCRIBE\r\nPUBLISH x\r\nPUBSUB NUMSUB a b\r\nPUBSUB NUMPAT\r\n",
        b"SSUBSCRIBE s\r\nPUBLISH a m\r\nSPUBLISH s m\r\nGET x\r\nSUNSUBSCRIBE\r\nQUIT\r\n",
    ];
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    if resp3 {
        send_and_read(&mut s, b"HELLO 3\r\n", Duration::from_millis(500));
    }
    let mut out = Vec::new();
    for step in STEPS {
        let (got, _) = send_and_read(&mut s, step, Duration::from_millis(700));
        out.extend_from_slice(&got);
    }
    out
}

#[test]
fn pubsub_bytes_match_plain_redis() {
    if !require_tools("pubsub_bytes_match_plain_redis", &["redis-server"]) {
        return;
    }
    let cluster = RespCluster::start();
    let plain = RedisServer::start();
    for resp3 in [false, true] {
        // One session per server at a time: PUBSUB NUMSUB counts every
        // subscriber of the server.
        let (want, got) = on_both(plain.port(), cluster.resp_port, |port| {
            subscribed_session(port, resp3)
        });
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "resp3 {resp3}"
        );
        assert!(
            want.ends_with(b"+OK\r\n"),
            "{}",
            String::from_utf8_lossy(&want)
        );
    }
}

/// HELLO while subscribed (RESP3 allows it, RESP2 refuses it): what
/// follows is in the new protocol, the confirmations and the messages
/// alike, and again after unsubscribing and switching back. What each
/// server wrote, HELLO's own replies left out (they name the server's
/// version and the client's id); the publisher's replies included.
fn protocol_switch_session(port: u16) -> Vec<u8> {
    const IDLE: Duration = Duration::from_millis(700);
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut publisher = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut out = Vec::new();
    let mut step = |s: &mut TcpStream, bytes: &[u8]| out.extend(send_and_read(s, bytes, IDLE).0);
    send_and_read(&mut s, b"HELLO 2\r\n", IDLE);
    step(&mut s, b"SUBSCRIBE z\r\n");
    step(&mut s, b"HELLO 3\r\n");
    step(&mut s, b"UNSUBSCRIBE\r\n");
    send_and_read(&mut s, b"HELLO 3\r\n", IDLE);
    step(&mut s, b"SUBSCRIBE a\r\nPSUBSCRIBE p*\r\nGET x\r\n");
    send_and_read(&mut s, b"HELLO 2\r\n", IDLE);
    step(&mut s, b"PING\r\nGET x\r\nSUBSCRIBE b\r\n");
    step(&mut publisher, b"PUBLISH a one\r\nPUBLISH pa two\r\n");
    step(&mut s, b"");
    // Channels named: with none, each server answers in its own hash order.
    step(&mut s, b"UNSUBSCRIBE a b\r\nPUNSUBSCRIBE\r\nGET x\r\n");
    send_and_read(&mut s, b"HELLO 3\r\n", IDLE);
    step(&mut s, b"SUBSCRIBE a\r\n");
    step(&mut publisher, b"PUBLISH a three\r\n");
    step(&mut s, b"");
    step(&mut s, b"UNSUBSCRIBE\r\nPING\r\n");
    out
}

#[test]
fn pubsub_hello_while_subscribed_matches_plain_redis() {
    if !require_tools(
        "pubsub_hello_while_subscribed_matches_plain_redis",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = RespCluster::start();
    let plain = RedisServer::start();
    let (want, got) = on_both(plain.port(), cluster.resp_port, protocol_switch_session);
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    // The messages were in it, in RESP2 then in RESP3.
    let want = String::from_utf8_lossy(&want);
    assert!(
        want.contains("*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$3\r\none"),
        "{want}"
    );
    assert!(
        want.contains(">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nthree"),
        "{want}"
    );
}

/// A subscriber of `channel` on the RESP port, its confirmation read.
fn subscriber(port: u16, channel: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let cmd = format!("SUBSCRIBE {channel}\r\n");
    let (got, _) = send_and_read(&mut s, cmd.as_bytes(), Duration::from_millis(1500));
    assert!(
        got.starts_with(b"*3\r\n$9\r\nsubscribe\r\n"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    s
}

#[test]
fn pubsub_shard_killed_closes_subscriber_with_an_error() {
    if !require_tools(
        "pubsub_shard_killed_closes_subscriber_with_an_error",
        &["redis-server"],
    ) {
        return;
    }
    let mut cluster = RespCluster::start_with(2, "");
    let mut sub = subscriber(cluster.resp_port, "alerts");
    // Another client's key on the surviving shard.
    let mut other =
        memshift_tests::RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(10))
            .expect("connect");
    cluster.shards[0].stop();
    let (text, closed) = read_to_close(&mut sub);
    assert!(
        text.starts_with("-ERR memshift: pub/sub connection to ") && text.contains("lost"),
        "the subscriber saw: {text:?}"
    );
    assert!(
        closed,
        "the subscriber's connection stayed open after {text:?}"
    );
    assert_eq!(
        metric(
            cluster.admin_port,
            "memshift_resp_subscriber_connections_lost_total"
        ),
        1.0
    );
    // Others go on; a new subscriber (the shard still down) gets an error
    // and the close, never a silent subscription.
    assert_eq!(
        other.cmd(&[b"PING"]).expect("ping"),
        memshift_tests::Resp::Simple("PONG".into())
    );
    let mut again = TcpStream::connect(("127.0.0.1", cluster.resp_port)).expect("connect");
    let (got, closed) = send_and_read(&mut again, b"SUBSCRIBE alerts\r\n", Duration::from_secs(10));
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("-ERR memshift: pub/sub connection to "),
        "{text:?}"
    );
    assert!(closed, "{text:?}");
    // Back up: subscribing works again.
    cluster.shards[0].restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = TcpStream::connect(("127.0.0.1", cluster.resp_port)).expect("connect");
        let (got, _) = send_and_read(&mut s, b"SUBSCRIBE alerts\r\n", Duration::from_secs(2));
        if got.starts_with(b"*3\r\n$9\r\nsubscribe") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&got)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Everything `s` gets until memshift closes it (or 15 s pass: not closed).
fn read_to_close(s: &mut TcpStream) -> (String, bool) {
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&got).into_owned(), closed)
}

#[test]
fn pubsub_silent_shard_closes_subscriber_with_an_error() {
    if !require_tools(
        "pubsub_silent_shard_closes_subscriber_with_an_error",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = RespCluster::start_with(2, "");
    let mut sub = subscriber(cluster.resp_port, "alerts");
    // The shard stops answering without closing anything.
    cluster.shards[0].signal(libc::SIGSTOP);
    let started = Instant::now();
    let (text, closed) = read_to_close(&mut sub);
    cluster.shards[0].signal(libc::SIGCONT);
    assert!(
        text.starts_with("-ERR memshift: pub/sub connection to ")
            && text.contains("PINGs unanswered"),
        "the subscriber saw: {text:?}"
    );
    assert!(
        closed,
        "the subscriber's connection stayed open after {text:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn pubsub_slow_subscriber_is_closed_and_memory_stays_bounded() {
    if !require_tools(
        "pubsub_slow_subscriber_is_closed_and_memory_stays_bounded",
        &["redis-server"],
    ) {
        return;
    }
    const MAX_PENDING_BYTES: usize = 4 * 1024 * 1024;
    let cluster = RespCluster::start_with(2, &format!("max_pending_bytes = {MAX_PENDING_BYTES}\n"));
    let pid = cluster.memshift.pid().expect("memshift pid");
    let slow = subscriber(cluster.resp_port, "flood");
    let reader = subscriber(cluster.resp_port, "flood");
    let rss_before = vm_rss_kib(pid);
    // The publisher floods 64 KB messages, many times the limit; a
    // subscriber that reads keeps up.
    let reading = std::thread::spawn(move || {
        let mut reader = reader;
        reader
            .set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        let mut total = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
            if total > 200 << 20 {
                break;
            }
        }
        total
    });
    let payload = "m".repeat(64 * 1024);
    let mut publisher = TcpStream::connect(("127.0.0.1", cluster.resp_port)).expect("connect");
    let mut peak = rss_before;
    let batch = format!(
        "*3\r\n$7\r\nPUBLISH\r\n$5\r\nflood\r\n${}\r\n{payload}\r\n",
        payload.len()
    )
    .repeat(64);
    for _ in 0..50 {
        if let Err(e) = publisher.write_all(batch.as_bytes()) {
            panic!("publish: {e}\n{}", cluster.memshift.stderr());
        }
        let (_, closed) = send_and_read(&mut publisher, b"", Duration::from_millis(50));
        assert!(!closed);
        peak = peak.max(vm_rss_kib(pid));
        if metric(cluster.admin_port, "memshift_slow_consumers_total") >= 1.0 {
            break;
        }
    }
    wait_until(
        Duration::from_secs(30),
        POLL,
        "memshift_slow_consumers_total to count the subscriber",
        || {
            peak = peak.max(vm_rss_kib(pid));
            (metric(cluster.admin_port, "memshift_slow_consumers_total") >= 1.0).then_some(())
        },
    );
    // The slow subscriber's connection is closed from memshift's side.
    let mut slow = slow;
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut sink = vec![0u8; 1 << 20];
    let closed = loop {
        match slow.read(&mut sink) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) => break e.kind() != std::io::ErrorKind::WouldBlock,
        }
    };
    assert!(closed, "the slow subscriber is still connected");
    let growth = peak.saturating_sub(rss_before);
    assert!(
        growth < 150 * 1024,
        "memshift grew {growth} KiB with one slow subscriber (limit {MAX_PENDING_BYTES} bytes)"
    );
    // Others unaffected: the reading subscriber got the flood.
    drop(publisher);
    let read = reading.join().expect("reader thread");
    assert!(read > 10 << 20, "the reading subscriber got {read} bytes");
    assert_eq!(
        metric(cluster.admin_port, "memshift_slow_consumers_total"),
        1.0
    );
}

#[test]
fn pubsub_subscriber_connections_are_bounded() {
    if !require_tools(
        "pubsub_subscriber_connections_are_bounded",
        &["redis-server"],
    ) {
        return;
    }
    // The channel space on the second shard, by name.
    let shards: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
    let redis_extra = format!(
        "max_subscriber_connections = 2\npubsub_shard = \"{}\"\n",
        addrs[1]
    );
    let (memshift, resp_port, admin_port) = start_resp_memshift(&addrs, |opts| {
        opts.redis_extra.push_str(&redis_extra);
    });
    let a = subscriber(resp_port, "a");
    let _b = subscriber(resp_port, "b");
    assert_eq!(
        shards[1].cmd(&[b"PUBSUB", b"NUMSUB", b"a"]),
        Resp::Array(Some(vec![Resp::Bulk(Some(b"a".to_vec())), Resp::Int(1)])),
        "{}",
        memshift.stderr()
    );
    let mut c = TcpStream::connect(("127.0.0.1", resp_port)).expect("connect");
    let (got, closed) = send_and_read(&mut c, b"SUBSCRIBE c\r\nPING\r\n", Duration::from_secs(2));
    assert_eq!(
        String::from_utf8_lossy(&got),
        "-ERR memshift: too many subscriber connections (redis.max_subscriber_connections = 2 are open); try again later\r\n+PONG\r\n"
    );
    assert!(!closed);
    assert_eq!(metric(admin_port, SUBSCRIBERS), 2.0);
    assert_eq!(
        metric(admin_port, "memshift_resp_subscribers_refused_total"),
        1.0
    );
    drop(a);
    wait_until(
        Duration::from_secs(10),
        POLL,
        "a subscriber connection closed",
        || (metric(admin_port, SUBSCRIBERS) == 1.0).then_some(()),
    );
    let (got, _) = send_and_read(&mut c, b"SUBSCRIBE c\r\n", Duration::from_secs(2));
    assert_eq!(got, b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n");
}

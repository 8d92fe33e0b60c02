//! SIGTERM: stop accepting, finish what is in flight, exit 0.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use memshift_tests::ops_support::{accepts_connections, mc_stats, pause_redis, wait_until};
use memshift_tests::resp_proxy::start_resp_memshift;
use memshift_tests::{escape, require_tools, Cluster, ClusterOptions, RedisServer, Unit};

use super::{key, opts, resp_command, value, write_and_place, POLL, REACT};

const IN_FLIGHT: usize = 100;
/// How long the slowed shard holds every command.
const PAUSE_MS: u64 = 3000;

#[test]
fn sigterm_drains_in_flight_requests_and_exits_zero() {
    if !require_tools(
        "sigterm_drains_in_flight_requests_and_exits_zero",
        &["redis-server"],
    ) {
        return;
    }
    let mut cluster = Cluster::start_with(ClusterOptions {
        // Longer than the pause: the slowed requests must succeed, not time out.
        timeout_ms: 10_000,
        ..opts(2, "drain_timeout_ms = 15000", "")
    });
    let placement = write_and_place(&cluster, "drain", 400, 0);
    let slowed: Vec<usize> = (0..placement.len())
        .filter(|&i| placement[i] == 0)
        .take(IN_FLIGHT)
        .collect();
    assert_eq!(
        slowed.len(),
        IN_FLIGHT,
        "not enough keys on shard 0: {placement:?}"
    );

    let bytes_read = |c: &mut memshift_tests::McClient| -> u64 {
        mc_stats(c).expect("stats")["bytes_read"]
            .parse()
            .expect("bytes_read")
    };
    let mut stats = cluster.client();
    let base = bytes_read(&mut stats);
    let mut stats_calls = 1u64;

    // Slow the shard, then pipeline 100 gets for its keys.
    pause_redis(&cluster.shards[0], PAUSE_MS);
    let paused_at = Instant::now();
    let mut c = cluster.client();
    c.set_read_timeout(Duration::from_secs(30))
        .expect("read timeout");
    let mut req = Vec::new();
    for &i in &slowed {
        req.extend_from_slice(format!("get {}\r\n", key("drain", i)).as_bytes());
    }
    c.send(&req).expect("send 100 gets");
    // All 100 are read (some wait for room to be dispatched: a session
    // keeps few requests of unknown size in flight); each stats request
    // counts its own 7 bytes.
    wait_until(REACT, POLL, "memshift to read the 100 gets", || {
        let read = bytes_read(&mut stats) - base - 7 * stats_calls;
        stats_calls += 1;
        (read >= req.len() as u64).then_some(())
    });

    cluster.memshift.sigterm();
    let signalled_at = paused_at.elapsed();
    // The listener closes at once, while the requests are still in flight.
    wait_until(REACT, POLL, "the listener to close after SIGTERM", || {
        (!accepts_connections(cluster.addr())).then_some(())
    });
    let refused_at = paused_at.elapsed();
    assert!(
        cluster.memshift.is_running(),
        "memshift exited before the in-flight requests were answered \
         (SIGTERM {signalled_at:?} and listener closed {refused_at:?} into a {PAUSE_MS} ms pause)\n{}",
        cluster.memshift.stderr()
    );

    for &i in &slowed {
        let k = key("drain", i);
        let units = c.read_reply().unwrap_or_else(|e| {
            panic!(
                "get {k} in flight at SIGTERM: no reply: {e}\n{}",
                cluster.memshift.stderr()
            )
        });
        let want = value("drain", i, 0);
        assert!(
            matches!(units.as_slice(), [v @ Unit::Value { .. }, end]
                if end.is_line(b"END\r\n") && v.data() == Some(&want[..])),
            "get {k} in flight at SIGTERM: {}",
            escape(&units.iter().flat_map(Unit::raw).collect::<Vec<u8>>(), 200)
        );
    }
    // Then the connection is closed and the process exits 0.
    let (rest, closed) =
        c.read_until_closed_or_idle(Duration::from_secs(10), Duration::from_secs(10));
    assert!(
        rest.is_empty(),
        "more after the 100 replies: {}",
        escape(&rest, 200)
    );
    assert!(closed, "the drained connection was not closed");
    let status = cluster
        .memshift
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| {
            panic!(
                "memshift still running 20 s after the drain\n{}",
                cluster.memshift.stderr()
            )
        });
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM: {status}\n{}",
        cluster.memshift.stderr()
    );
    let log = cluster.memshift.stderr();
    assert!(log.contains("draining"), "no drain log line:\n{log}");
    assert!(
        !log.contains("drain timeout"),
        "the drain hit its timeout:\n{log}"
    );
}

#[test]
fn drain_is_bounded_by_drain_timeout() {
    if !require_tools("drain_is_bounded_by_drain_timeout", &["redis-server"]) {
        return;
    }
    const DRAIN_MS: u64 = 1000;
    const LONG_PAUSE_MS: u64 = 10_000;
    let mut cluster = Cluster::start_with(ClusterOptions {
        timeout_ms: 20_000,
        ..opts(1, &format!("drain_timeout_ms = {DRAIN_MS}"), "")
    });
    let mut c = cluster.client();
    c.set("stuck", b"1").expect("set");
    pause_redis(&cluster.shards[0], LONG_PAUSE_MS);
    let paused_at = Instant::now();
    c.send(b"get stuck\r\n").expect("send");
    // The only get of this process: dispatched once cmd_get is 1.
    wait_until(REACT, POLL, "memshift to dispatch the get", || {
        let n: u64 = mc_stats(&mut cluster.client()).expect("stats")["cmd_get"]
            .parse()
            .expect("cmd_get");
        (n >= 1).then_some(())
    });
    cluster.memshift.sigterm();
    let signalled = Instant::now();
    let status = cluster
        .memshift
        .wait_exit(Duration::from_secs(30))
        .expect("memshift did not exit after SIGTERM");
    let took = signalled.elapsed();
    assert_eq!(
        status.code(),
        Some(0),
        "exit status: {status}\n{}",
        cluster.memshift.stderr()
    );
    assert!(
        paused_at.elapsed() < Duration::from_millis(LONG_PAUSE_MS),
        "memshift waited for the stuck request ({took:?} after SIGTERM) instead of giving up \
         after drain_timeout_ms = {DRAIN_MS}\n{}",
        cluster.memshift.stderr()
    );
    let log = cluster.memshift.stderr();
    assert!(
        log.contains("drain timeout"),
        "no drain-timeout log line:\n{log}"
    );
    // One request (the stuck get) was dropped at the deadline: its
    // connection closed at the request boundary (nothing half-written),
    // so none had to be aborted.
    let line = log
        .lines()
        .find(|l| l.contains("drain timeout"))
        .unwrap_or_default();
    assert!(
        line.contains("dropped=1"),
        "the drain-timeout line does not count the one dropped request: {line}\n{log}"
    );
    assert!(
        !log.contains("closing remaining connections"),
        "a connection had to be aborted:\n{log}"
    );
    let (rest, closed) =
        c.read_until_closed_or_idle(Duration::from_secs(5), Duration::from_secs(5));
    assert!(
        rest.is_empty(),
        "a reply to the dropped get: {}",
        escape(&rest, 200)
    );
    assert!(closed, "the connection of the dropped get was not closed");
    eprintln!("bounded drain: exited {took:?} after SIGTERM (drain_timeout_ms = {DRAIN_MS})");
}

/// Issue 13: SIGTERM answers every complete request memshift has already
/// read, not only those it had dispatched (it stops dispatching at 1,024
/// waiting requests, so the rest of a big pipelined batch sits parsed-to-be
/// in its read buffer when the signal comes).
#[test]
fn sigterm_answers_every_request_already_read() {
    if !require_tools(
        "sigterm_answers_every_request_already_read",
        &["redis-server"],
    ) {
        return;
    }
    const REQUESTS: usize = 3000;
    const GET: &[u8] = b"get k\r\n";
    let mut cluster = Cluster::start_with(ClusterOptions {
        timeout_ms: 30_000,
        ..opts(1, "drain_timeout_ms = 30000", "")
    });
    let mut c = cluster.client();
    c.set("k", b"hello").expect("set");
    let mut stats = cluster.client();
    let bytes_read = |s: &mut memshift_tests::McClient| -> u64 {
        mc_stats(s).expect("stats")["bytes_read"]
            .parse()
            .expect("bytes_read")
    };
    let base = bytes_read(&mut stats);
    let mut stats_calls = 1u64;

    // The shard holds every command for a while: requests pile up in memshift.
    pause_redis(&cluster.shards[0], 8000);
    c.set_read_timeout(Duration::from_secs(60))
        .expect("read timeout");
    c.send(&GET.repeat(REQUESTS)).expect("send the batch");
    // Wait until memshift has stopped reading (the batch's share of
    // bytes_read is stable; each stats request counts its own 7 bytes).
    let mut last = 0u64;
    let mut stable_since = Instant::now();
    let read = wait_until(REACT, POLL, "memshift to stop reading the batch", || {
        let now = bytes_read(&mut stats);
        let batch = now - base - 7 * stats_calls;
        stats_calls += 1;
        if batch != last {
            last = batch;
            stable_since = Instant::now();
            return None;
        }
        (batch > 0 && stable_since.elapsed() > Duration::from_millis(300)).then_some(batch)
    });
    let complete = (read as usize / GET.len()).min(REQUESTS);
    assert!(complete > 1024, "memshift read only {complete} requests");
    cluster.memshift.sigterm();

    let mut answered = 0usize;
    // Replies until the connection closes after the drain.
    while let Ok(units) = c.read_reply() {
        assert!(
            matches!(units.as_slice(), [v @ Unit::Value { .. }, end]
                if end.is_line(b"END\r\n") && v.data() == Some(&b"hello"[..])),
            "reply {answered}: {}",
            escape(&units.iter().flat_map(Unit::raw).collect::<Vec<u8>>(), 200)
        );
        answered += 1;
    }
    assert!(
        answered >= complete,
        "memshift had read {complete} complete requests but answered {answered} before closing\n{}",
        cluster.memshift.stderr()
    );
    let status = cluster
        .memshift
        .wait_exit(Duration::from_secs(30))
        .expect("memshift did not exit after SIGTERM");
    assert_eq!(status.code(), Some(0), "exit status: {status}");
    eprintln!("drain: read {complete} complete requests, answered {answered}");
}

/// Issue 24: a draining connection goes on reading what its client sent.
/// The shard of the keys held for `HOLD_MS` (one shard: every get waits on
/// it, as a client's keys on a slow shard do); a client writes
/// `DRAIN_REQUESTS` gets in one write; SIGTERM `SIGTERM_AFTER_MS` later:
/// every get is answered, in order, then the connection closes and memshift
/// exits 0 (before: 1,664 answered, the bytes of the session's first reads).
/// Rounds per protocol: `MEMSHIFT_DRAIN_ROUNDS` (default 2).
const DRAIN_REQUESTS: usize = 3000;
const HOLD_MS: u64 = 350;
const SIGTERM_AFTER_MS: u64 = 130;

fn drain_rounds() -> usize {
    std::env::var("MEMSHIFT_DRAIN_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// The memcached side of the scenario (`dp:N` keys, values `dp-value-N-0`).
#[test]
fn sigterm_answers_a_pipelined_batch_still_in_the_socket_memcached() {
    if !require_tools(
        "sigterm_answers_a_pipelined_batch_still_in_the_socket_memcached",
        &["redis-server"],
    ) {
        return;
    }
    for round in 0..drain_rounds() {
        let mut cluster = Cluster::start_with(ClusterOptions {
            timeout_ms: 10_000,
            ..opts(1, "drain_timeout_ms = 15000", "")
        });
        write_and_place(&cluster, "dp", DRAIN_REQUESTS, 0);
        let mut request = Vec::new();
        let mut expected = Vec::new();
        for i in 0..DRAIN_REQUESTS {
            let (k, v) = (key("dp", i), value("dp", i, 0));
            request.extend_from_slice(format!("get {k}\r\n").as_bytes());
            expected.extend_from_slice(format!("VALUE {k} 0 {}\r\n", v.len()).as_bytes());
            expected.extend_from_slice(&v);
            expected.extend_from_slice(b"\r\nEND\r\n");
        }
        let shard = &cluster.shards[0];
        let got = drain_round(cluster.addr(), shard, &request, || {
            cluster.memshift.sigterm()
        });
        check_drained(
            round,
            "memcached",
            &got,
            &expected,
            b"VALUE ",
            &mut cluster.memshift,
        );
    }
}

/// The RESP side: `GET dp:N` × 3,000 on the RESP port.
#[test]
fn sigterm_answers_a_pipelined_batch_still_in_the_socket_resp() {
    if !require_tools(
        "sigterm_answers_a_pipelined_batch_still_in_the_socket_resp",
        &["redis-server"],
    ) {
        return;
    }
    for round in 0..drain_rounds() {
        let shards = [RedisServer::start()];
        let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
        let (mut memshift, resp_port, _) = start_resp_memshift(&addrs, |o| {
            o.timeout_ms = 10_000;
            o.server_extra.push_str("drain_timeout_ms = 15000\n");
        });
        let addr = format!("127.0.0.1:{resp_port}");
        let mut request = Vec::new();
        let mut expected = Vec::new();
        let mut sets = Vec::new();
        for i in 0..DRAIN_REQUESTS {
            let (k, v) = (key("dp", i), value("dp", i, 0));
            sets.extend_from_slice(&resp_command(&[b"SET", k.as_bytes(), &v]));
            request.extend_from_slice(&resp_command(&[b"GET", k.as_bytes()]));
            expected.extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
            expected.extend_from_slice(&v);
            expected.extend_from_slice(b"\r\n");
        }
        let mut setter = TcpStream::connect(&addr).expect("connect RESP port");
        setter
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        setter.write_all(&sets).expect("send the sets");
        let want = b"+OK\r\n".repeat(DRAIN_REQUESTS);
        let mut got = vec![0u8; want.len()];
        setter.read_exact(&mut got).expect("read the sets' replies");
        assert_eq!(got, want, "the sets were not all stored");
        drop(setter);
        let got = drain_round(&addr, &shards[0], &request, || memshift.sigterm());
        check_drained(round, "RESP", &got, &expected, b"$", &mut memshift);
    }
}

/// Hold `shard`, write `request` in one write, SIGTERM (through `sigterm`)
/// `SIGTERM_AFTER_MS` later, and read everything until memshift closes.
fn drain_round(addr: &str, shard: &RedisServer, request: &[u8], sigterm: impl FnOnce()) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    pause_redis(shard, HOLD_MS);
    let start = Instant::now();
    s.write_all(request).expect("send the batch");
    std::thread::sleep(Duration::from_millis(SIGTERM_AFTER_MS).saturating_sub(start.elapsed()));
    sigterm();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) => panic!("reading the replies: {e} after {} bytes", got.len()),
    }
    got
}

fn check_drained(
    round: usize,
    front: &str,
    got: &[u8],
    expected: &[u8],
    reply_start: &[u8],
    memshift: &mut memshift_tests::Memshift,
) {
    let answered = got
        .windows(reply_start.len())
        .filter(|w| *w == reply_start)
        .count();
    assert!(
        got == expected,
        "{front} round {round}: {answered} of {DRAIN_REQUESTS} answered before the close \
         ({} of {} bytes; first difference at {:?})\n{}",
        got.len(),
        expected.len(),
        got.iter().zip(expected).position(|(a, b)| a != b),
        memshift.stderr()
    );
    let status = memshift
        .wait_exit(Duration::from_secs(30))
        .expect("memshift did not exit after SIGTERM");
    assert_eq!(status.code(), Some(0), "exit status: {status}");
    let log = memshift.stderr();
    assert!(
        !log.contains("drain timeout"),
        "{front} round {round}: the drain hit its timeout:\n{log}"
    );
    eprintln!("{front} drain round {round}: {answered} of {DRAIN_REQUESTS} answered, then closed");
}

/// Issue 24: draining, a connection goes on answering a client that keeps
/// talking (gaps shorter than `drain_quiet_ms`), and closes once the client
/// has been quiet that long (before: closed at SIGTERM between requests).
#[test]
fn draining_connection_serves_until_the_client_goes_quiet() {
    if !require_tools(
        "draining_connection_serves_until_the_client_goes_quiet",
        &["redis-server"],
    ) {
        return;
    }
    /// Long enough that the test's own gaps (a loaded box) stay under it.
    const QUIET_MS: u64 = 1500;
    const REQUESTS: usize = 15;
    let mut cluster = Cluster::start_with(opts(
        1,
        &format!("drain_timeout_ms = 20000\ndrain_quiet_ms = {QUIET_MS}"),
        "",
    ));
    let mut c = cluster.client();
    c.set_read_timeout(Duration::from_secs(10))
        .expect("read timeout");
    c.set("talk", b"on").expect("set");
    cluster.memshift.sigterm();
    wait_until(REACT, POLL, "the listener to close after SIGTERM", || {
        (!accepts_connections(cluster.addr())).then_some(())
    });
    for i in 0..REQUESTS {
        let got = c.get("talk").unwrap_or_else(|e| {
            panic!("get {i} while draining: {e}\n{}", cluster.memshift.stderr())
        });
        assert_eq!(got.as_deref(), Some(&b"on"[..]), "get {i} while draining");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Quiet now: the connection closes after about QUIET_MS.
    let quiet_from = Instant::now();
    let (rest, closed) =
        c.read_until_closed_or_idle(Duration::from_secs(10), Duration::from_secs(10));
    let took = quiet_from.elapsed();
    assert!(rest.is_empty(), "unasked bytes: {}", escape(&rest, 200));
    assert!(closed, "the quiet connection was not closed");
    // It counts from memshift's last reply, a little before `quiet_from`.
    assert!(
        took >= Duration::from_millis(QUIET_MS / 2),
        "closed {took:?} into the quiet period of {QUIET_MS} ms"
    );
    let status = cluster
        .memshift
        .wait_exit(Duration::from_secs(20))
        .expect("memshift did not exit after the drain");
    assert_eq!(status.code(), Some(0), "exit status: {status}");
    eprintln!("draining: {REQUESTS} requests answered, closed {took:?} after the last");
}

//! Limits that protect the process: slow consumers, max connections, idle
//! timeout.

use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use memshift_tests::ops_support::{metric, pause_redis, poll_until, vm_rss_kib, wait_until};
use memshift_tests::{escape, require_tools, Cluster, McClient};

use super::{assert_get, opts, POLL, REACT};

const FLOOD_GETS: usize = 1_000_000;
const MAX_PENDING: usize = 10_000;
const RSS_GROWTH_LIMIT_KIB: u64 = 200 * 1024;

/// Writes `FLOOD_GETS` pipelined gets and never reads. Returns how many were
/// written and the error that stopped it, if any.
fn flood(mut s: TcpStream, key: &str) -> (usize, Option<io::Error>) {
    const PER_WRITE: usize = 5_000;
    let chunk = format!("get {key}\r\n").repeat(PER_WRITE).into_bytes();
    let mut written = 0;
    while written < FLOOD_GETS {
        if let Err(e) = s.write_all(&chunk) {
            return (written, Some(e));
        }
        written += PER_WRITE;
    }
    (written, None)
}

#[test]
fn slow_consumer_is_closed_and_memory_stays_bounded() {
    if !require_tools(
        "slow_consumer_is_closed_and_memory_stays_bounded",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = Cluster::start_with(opts(2, &format!("max_pending_replies = {MAX_PENDING}"), ""));
    let pid = cluster.memshift.pid().expect("memshift pid");
    // 1 KB values: the unread replies outgrow every socket buffer quickly.
    let big = vec![b'x'; 1000];
    cluster.client().set("slow:big", &big).expect("set");
    let rss_before = vm_rss_kib(pid);

    // Another client keeps working the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let other = {
        let (addr, stop, ops, errors) = (
            cluster.addr().to_string(),
            stop.clone(),
            ops.clone(),
            errors.clone(),
        );
        thread::spawn(move || {
            let mut c = McClient::connect(&addr).expect("connect");
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let (k, v) = (format!("other:{}", i % 50), format!("v{i}"));
                let res = c.set(&k, v.as_bytes()).and_then(|()| c.get(&k));
                match res {
                    Ok(Some(got)) if got == v.as_bytes() => {}
                    other => {
                        errors.lock().unwrap().push(format!("{k}: {other:?}"));
                        return;
                    }
                }
                ops.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    wait_until(REACT, POLL, "the other client to run", || {
        (ops.load(Ordering::Relaxed) > 0).then_some(())
    });

    let stream = TcpStream::connect(cluster.addr()).expect("connect the slow consumer");
    stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .expect("write timeout");
    let reader = stream.try_clone().expect("clone");
    let writer = thread::spawn(move || flood(stream, "slow:big"));

    let mut peak = rss_before;
    let ops_at_flood = ops.load(Ordering::Relaxed);
    wait_until(
        Duration::from_secs(60),
        POLL,
        "memshift_slow_consumers_total to count the client",
        || {
            peak = peak.max(vm_rss_kib(pid));
            (metric(cluster.admin_port, "memshift_slow_consumers_total") >= 1.0).then_some(())
        },
    );
    while !writer.is_finished() {
        peak = peak.max(vm_rss_kib(pid));
        thread::sleep(POLL);
    }
    let (written, err) = writer.join().expect("flood thread panicked");
    peak = peak.max(vm_rss_kib(pid));
    let err = err.unwrap_or_else(|| {
        panic!("memshift took all {FLOOD_GETS} gets from a client that never read a reply")
    });
    assert!(
        !matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "the slow consumer's writes stalled (memshift stopped reading) instead of being \
         closed: {err} after {written} gets"
    );
    // The socket is closed (reset) from memshift's side.
    reader
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut sink = vec![0u8; 1 << 20];
    let closed = loop {
        match io::Read::read(&mut &reader, &mut sink) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                break !matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                )
            }
        }
    };
    assert!(closed, "the slow consumer's connection is still open");
    assert_eq!(
        metric(cluster.admin_port, "memshift_slow_consumers_total"),
        1.0
    );

    let growth = peak.saturating_sub(rss_before);
    assert!(
        growth < RSS_GROWTH_LIMIT_KIB,
        "memshift's RSS grew by {} MiB (from {} MiB) for one client that never reads",
        growth / 1024,
        rss_before / 1024
    );

    // The other client kept going during the flood, and new clients work.
    wait_until(REACT, POLL, "the other client to make progress", || {
        (ops.load(Ordering::Relaxed) > ops_at_flood + 20).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    other.join().expect("other client panicked");
    let errors = errors.lock().unwrap();
    assert!(
        errors.is_empty(),
        "the other client failed during the flood: {errors:?}"
    );
    let mut c = cluster.client();
    assert_get(
        &mut c,
        "slow:big",
        Some(&big),
        "after the slow consumer was closed",
    );
    eprintln!(
        "slow consumer: closed after {written} gets written; RSS {} MiB -> peak {} MiB",
        rss_before / 1024,
        peak / 1024
    );
}

/// Large values: `max_pending_replies` replies of 256 KB each would be
/// 2.5 GB, so a limit on the count of replies alone does not bound memory.
/// The client is dropped as soon as the growth passes the limit, so a
/// failing run costs the machine little.
#[test]
fn slow_consumer_of_large_values_keeps_memory_bounded() {
    if !require_tools(
        "slow_consumer_of_large_values_keeps_memory_bounded",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = Cluster::start_with(opts(1, &format!("max_pending_replies = {MAX_PENDING}"), ""));
    let pid = cluster.memshift.pid().expect("memshift pid");
    let big = vec![b'y'; 256 * 1024];
    cluster.client().set("slow:huge", &big).expect("set");
    let rss_before = vm_rss_kib(pid);

    let stream = TcpStream::connect(cluster.addr()).expect("connect the slow consumer");
    stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .expect("write timeout");
    let control = stream.try_clone().expect("clone");
    let writer = thread::spawn(move || flood(stream, "slow:huge"));
    let mut peak = rss_before;
    let deadline = Instant::now() + Duration::from_secs(60);
    let outcome = loop {
        peak = peak.max(vm_rss_kib(pid));
        if peak.saturating_sub(rss_before) >= RSS_GROWTH_LIMIT_KIB {
            break "memory grew past the limit";
        }
        if metric(cluster.admin_port, "memshift_slow_consumers_total") >= 1.0 {
            break "closed as a slow consumer";
        }
        if writer.is_finished() {
            break "the flood ended";
        }
        assert!(
            Instant::now() < deadline,
            "neither closed nor growing after 60 s"
        );
        thread::sleep(POLL);
    };
    // Stop the flood whatever happened, then let memshift settle.
    let _ = control.shutdown(std::net::Shutdown::Both);
    let (written, _) = writer.join().expect("flood thread panicked");
    let growth = peak.saturating_sub(rss_before);
    assert!(
        growth < RSS_GROWTH_LIMIT_KIB,
        "memshift's RSS grew by {} MiB (from {} MiB) for one client that pipelined gets of a \
         256 KB value and never read ({written} gets written; {outcome}): \
         server.max_pending_replies = {MAX_PENDING} counts replies, not bytes",
        growth / 1024,
        rss_before / 1024
    );
    assert_eq!(
        metric(cluster.admin_port, "memshift_slow_consumers_total"),
        1.0,
        "the slow consumer was not closed and counted ({outcome})"
    );
    let mut c = cluster.client();
    assert!(version_ok(&mut c), "memshift no longer serves");
}

fn version_ok(c: &mut McClient) -> bool {
    c.request(b"version\r\n")
        .map(|r| r.starts_with(b"VERSION "))
        .unwrap_or(false)
}

fn gauge_connections(cluster: &Cluster) -> f64 {
    metric(cluster.admin_port, "memshift_client_connections")
}

#[test]
fn connection_limit_rejects_with_memcached_error() {
    if !require_tools(
        "connection_limit_rejects_with_memcached_error",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = Cluster::start_with(opts(1, "max_connections = 5", ""));
    let mut clients: Vec<McClient> = (0..5).map(|_| cluster.client()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        assert!(version_ok(c), "connection {} of 5 does not work", i + 1);
    }
    let mut sixth = cluster.client();
    let (bytes, closed) =
        sixth.read_until_closed_or_idle(Duration::from_secs(5), Duration::from_secs(10));
    assert_eq!(
        escape(&bytes, 200),
        escape(b"ERROR Too many open connections\r\n", 200),
        "the 6th connection"
    );
    assert!(closed, "the 6th connection was not closed");
    assert_eq!(
        metric(cluster.admin_port, "memshift_rejected_connections_total"),
        1.0
    );

    drop(clients.pop());
    wait_until(REACT, POLL, "the closed connection to be released", || {
        (gauge_connections(&cluster) == 4.0).then_some(())
    });
    let mut again = cluster.client();
    assert!(
        version_ok(&mut again),
        "a new connection after one closed does not work"
    );
    for c in &mut clients {
        assert!(version_ok(c), "an accepted connection stopped working");
    }
    assert_eq!(
        metric(cluster.admin_port, "memshift_rejected_connections_total"),
        1.0
    );
}

const IDLE_MS: u64 = 300;

#[test]
fn idle_clients_are_closed_active_ones_are_not() {
    if !require_tools(
        "idle_clients_are_closed_active_ones_are_not",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = Cluster::start_with(opts(1, &format!("idle_timeout_ms = {IDLE_MS}"), ""));
    const { assert!(super::TIMEOUT_MS > IDLE_MS * 4) };
    // Active: a request every 25 ms for five idle periods.
    let active = {
        let addr = cluster.addr().to_string();
        thread::spawn(move || {
            let mut c = McClient::connect(&addr).expect("connect");
            let until = Instant::now() + Duration::from_millis(IDLE_MS * 5);
            let mut n = 0;
            while Instant::now() < until {
                if !version_ok(&mut c) {
                    return Err(format!("the active client was closed after {n} requests"));
                }
                n += 1;
                thread::sleep(Duration::from_millis(25));
            }
            Ok(c)
        })
    };
    // Idle after one request.
    let mut idle = cluster.client();
    assert!(version_ok(&mut idle));
    let since = Instant::now();
    let (bytes, closed) =
        idle.read_until_closed_or_idle(Duration::from_secs(5), Duration::from_secs(5));
    let took = since.elapsed();
    assert!(
        closed,
        "an idle client was not closed within 5 s (idle_timeout_ms = {IDLE_MS})"
    );
    assert!(
        bytes.is_empty(),
        "unexpected bytes before the close: {}",
        escape(&bytes, 200)
    );
    assert!(
        took >= Duration::from_millis(IDLE_MS * 2 / 3),
        "an idle client was closed after {took:?}, before idle_timeout_ms = {IDLE_MS}"
    );
    // Silent from the start.
    let mut silent = cluster.client();
    let (_, closed) =
        silent.read_until_closed_or_idle(Duration::from_secs(5), Duration::from_secs(5));
    assert!(closed, "a client that never sent anything was not closed");

    // A request waiting on a slow shard longer than the idle timeout is not
    // idleness: it is answered.
    let mut waiting = cluster.client();
    waiting.set("idle:slow", b"v").expect("set");
    pause_redis(&cluster.shards[0], IDLE_MS * 3);
    waiting
        .set_read_timeout(Duration::from_secs(10))
        .expect("read timeout");
    assert_get(
        &mut waiting,
        "idle:slow",
        Some(b"v"),
        "waiting on a paused shard past idle_timeout_ms",
    );

    let mut c = active
        .join()
        .expect("active client panicked")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(version_ok(&mut c), "the active client was closed");
}

/// Idle connections cost little memory, and memory comes back when they
/// close: an idle session holds no buffers, no reply channel and a small
/// task (the busy part of a session is boxed), and freed memory is handed
/// back to the OS after connection churn.
#[test]
fn idle_connections_cost_little_memory_and_it_comes_back() {
    const CONNS: usize = 3_000;
    const KIB_PER_IDLE_CONNECTION: u64 = 4;
    if !require_tools(
        "idle_connections_cost_little_memory_and_it_comes_back",
        &["redis-server"],
    ) {
        return;
    }
    if raise_own_nofile_limit() < (CONNS + 500) as u64 {
        eprintln!(
            "skipping: the open-files hard limit is below {}",
            CONNS + 500
        );
        return;
    }
    let cluster = Cluster::start_with(opts(2, "", ""));
    let pid = cluster.memshift.pid().expect("memshift pid");
    let mut first = cluster.client();
    first.set("idle:k", b"v").expect("set");
    assert_get(&mut first, "idle:k", Some(b"v"), "before");
    drop(first);
    thread::sleep(Duration::from_millis(500));
    let rss_before = vm_rss_kib(pid);

    // Each connection is used once (a get through a shard: buffers and a
    // reply channel are created), then left idle.
    let mut conns = Vec::with_capacity(CONNS);
    for i in 0..CONNS {
        let mut c = McClient::connect(cluster.addr()).expect("connect");
        if i % 2 == 0 {
            assert_get(&mut c, "idle:k", Some(b"v"), "opening");
        } else {
            assert!(version_ok(&mut c), "version on connection {i}");
        }
        conns.push(c);
    }
    let budget = rss_before + CONNS as u64 * KIB_PER_IDLE_CONNECTION;
    let mut idle_rss = 0;
    let settled = poll_until(Duration::from_secs(20), POLL, || {
        idle_rss = vm_rss_kib(pid);
        (idle_rss <= budget).then_some(())
    });
    assert!(
        settled.is_some(),
        "{CONNS} idle connections: RSS {rss_before} -> {idle_rss} KiB, {:.2} KiB per \
         connection (budget {KIB_PER_IDLE_CONNECTION} KiB)",
        (idle_rss.saturating_sub(rss_before)) as f64 / CONNS as f64
    );
    eprintln!(
        "{CONNS} idle connections: {:.2} KiB RSS per connection",
        (idle_rss.saturating_sub(rss_before)) as f64 / CONNS as f64
    );
    // Idle sessions wake up and serve again.
    for (i, c) in conns.iter_mut().enumerate().step_by(97) {
        assert_get(c, "idle:k", Some(b"v"), "after idling");
        assert!(version_ok(c), "version on connection {i} after idling");
    }
    drop(conns);

    // Closed: memory is given back (within 2 MiB of where it started).
    let mut after = 0;
    let returned = poll_until(Duration::from_secs(20), POLL, || {
        after = vm_rss_kib(pid);
        (after <= rss_before + 2048).then_some(())
    });
    assert!(
        returned.is_some(),
        "after closing {CONNS} connections RSS stayed at {after} KiB (was {rss_before} KiB \
         before they opened)"
    );
}

/// Raise this process's soft open-files limit to the hard one; returns it.
#[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every Unix
fn raise_own_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return 0;
            }
        }
    }
    lim.rlim_cur as u64
}

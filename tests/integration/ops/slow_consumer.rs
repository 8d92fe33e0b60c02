//! Issue 13: one client that pipelines gets of a large value and never reads
//! its replies must not delay or fail another client's requests, and the
//! memory it pins stays within the configured byte bound.

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use memshift_tests::client::Unit;
use memshift_tests::ops_support::{metric, poll_until, vm_rss_kib};
use memshift_tests::{escape, require_tools, Cluster, ClusterOptions, McClient};

use super::POLL;

const BIG: usize = 1_000_000;
const SLOW_GETS: usize = 10_000;
/// `server.max_pending_bytes` for the test.
const MAX_PENDING_BYTES: u64 = 32 * 1024 * 1024;
/// RSS growth allowed on top of the byte bound: replies in flight (a new
/// session's first batch may put 128 gets in flight before any reply says
/// how large they are), output and read buffers, allocator slack.
const RSS_SLACK_KIB: u64 = 64 * 1024;
/// Longest the other client may wait for one answer (a loaded 2-core box,
/// debug build); the fix measures in milliseconds.
const LATENCY_BOUND: Duration = Duration::from_secs(1);
/// How long the other client keeps working after the slow one started.
const RUN_FOR: Duration = Duration::from_secs(4);

/// Shrinks the socket's receive buffer (the slow client reads nothing, so
/// memshift's replies pile up in memshift, not in the kernel).
fn small_receive_buffer(s: &TcpStream) {
    let size: libc::c_int = 4096;
    // SAFETY: setsockopt on an open socket with a pointer to a local int.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_RCVBUF)");
}

/// A client that writes `request` (in a thread) and never reads, through a
/// 4 KiB receive buffer; memshift (`pid`, `admin_port`) is watched for
/// `run_for`. Returns when it closed the client as a slow consumer (from
/// the first write), and memshift's peak RSS.
pub(super) fn never_reading_client(
    addr: &str,
    request: Vec<u8>,
    admin_port: u16,
    pid: u32,
    run_for: Duration,
) -> (Option<Duration>, u64) {
    let slow = TcpStream::connect(addr).expect("connect the slow client");
    small_receive_buffer(&slow);
    slow.set_write_timeout(Some(Duration::from_secs(30)))
        .expect("write timeout");
    let started = Instant::now();
    let writer = {
        let mut s = slow.try_clone().expect("clone");
        thread::spawn(move || s.write_all(&request))
    };
    let mut peak = vm_rss_kib(pid);
    let closed = poll_until(Duration::from_secs(30), POLL, || {
        peak = peak.max(vm_rss_kib(pid));
        (metric(admin_port, "memshift_slow_consumers_total") >= 1.0).then_some(())
    });
    let closed_after = closed.map(|()| started.elapsed());
    while started.elapsed() < run_for {
        peak = peak.max(vm_rss_kib(pid));
        thread::sleep(POLL);
    }
    drop(slow);
    let _ = writer.join();
    (closed_after, peak)
}

/// One request of the other client: the reply it must get, or why not.
fn check(c: &mut McClient, keys: &[(&str, &[u8])]) -> Result<(), String> {
    let names: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
    c.send(format!("get {}\r\n", names.join(" ")).as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let units = c.read_reply().map_err(|e| format!("read: {e}"))?;
    let ok = units.len() == keys.len() + 1
        && units.last().is_some_and(|u| u.is_line(b"END\r\n"))
        && keys.iter().zip(&units).all(|((k, v), u)| {
            matches!(u, Unit::Value { key, .. } if key == k.as_bytes()) && u.data() == Some(*v)
        });
    if ok {
        return Ok(());
    }
    Err(format!(
        "get {}: {}",
        names.join(" "),
        escape(&units.iter().flat_map(Unit::raw).collect::<Vec<u8>>(), 200)
    ))
}

#[test]
fn slow_consumer_does_not_stall_or_fail_other_clients() {
    if !require_tools(
        "slow_consumer_does_not_stall_or_fail_other_clients",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = Cluster::start_with(ClusterOptions {
        shards: 1,
        timeout_ms: 1000,
        server_extra: format!("max_pending_bytes = {MAX_PENDING_BYTES}"),
        redis_extra: String::new(),
        extra_tables: String::new(),
    });
    let pid = cluster.memshift.pid().expect("memshift pid");
    let big = vec![b'b'; BIG];
    let mut setup = cluster.client();
    setup.set("big", &big).expect("set big");
    setup.set("small", b"small-value").expect("set small");
    setup.set("small2", b"small-value-2").expect("set small2");
    drop(setup);
    let rss_before = vm_rss_kib(pid);

    // The other client: single and multi-gets every 10 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let other = {
        let (addr, stop) = (cluster.addr().to_string(), stop.clone());
        thread::spawn(move || {
            let mut c = McClient::connect(&addr).expect("connect");
            c.set_read_timeout(Duration::from_secs(10))
                .expect("read timeout");
            let (mut n, mut slowest) = (0u64, Duration::ZERO);
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let keys: &[(&str, &[u8])] = if n % 2 == 0 {
                    &[("small", b"small-value")]
                } else {
                    &[("small", b"small-value"), ("small2", b"small-value-2")]
                };
                let started = Instant::now();
                let res = check(&mut c, keys);
                let took = started.elapsed();
                slowest = slowest.max(took);
                n += 1;
                match res {
                    Err(e) => failures.push(format!("request {n}: {e}")),
                    Ok(()) if took > LATENCY_BOUND => {
                        failures.push(format!("request {n}: answered after {took:?}"))
                    }
                    Ok(()) => {}
                }
                if failures.len() >= 10 {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
            (n, slowest, failures)
        })
    };

    // The slow client: 10,000 pipelined gets of the big value, never read.
    let (closed_after, peak) = never_reading_client(
        cluster.addr(),
        b"get big\r\n".repeat(SLOW_GETS),
        cluster.admin_port,
        pid,
        RUN_FOR,
    );
    stop.store(true, Ordering::Relaxed);
    let (requests, slowest, failures) = other.join().expect("other client panicked");
    let growth = peak.saturating_sub(rss_before);
    eprintln!(
        "slow consumer closed after {closed_after:?}; other client: {requests} requests, \
         slowest {slowest:?}; RSS {} MiB -> peak {} MiB (+{} MiB)",
        rss_before / 1024,
        peak / 1024,
        growth / 1024
    );
    assert!(
        failures.is_empty(),
        "the other client was failed or delayed past {LATENCY_BOUND:?} by a slow consumer \
         ({requests} requests, slowest {slowest:?}): {failures:#?}"
    );
    assert!(
        requests > 20,
        "the other client made only {requests} requests"
    );
    assert!(
        growth < MAX_PENDING_BYTES / 1024 + RSS_SLACK_KIB,
        "memshift's RSS grew by {} MiB for one slow consumer (max_pending_bytes = {} MiB)",
        growth / 1024,
        MAX_PENDING_BYTES >> 20
    );
    assert!(
        closed_after.is_some(),
        "the slow client was not closed as a slow consumer within 30 s"
    );
}

//! Issue 13: faults under load, checked by the verifying client
//! (`memshift_tests::verify`): 8 clients, each with its own keys and values
//! that name client, key and write sequence, so a wrong reply (cross-talk),
//! an older value than an acknowledged write (stale), a lost acknowledged
//! write, an error on a healthy shard or a reply slower than the timeout is
//! seen on the request that got it.
//!
//! Which misses are allowed is decided afterwards from where each key lives
//! (`placement`): only keys of a shard that failed (killed: it restarts
//! empty; ejected: its diverted keys are cleaned before it rejoins) or that
//! moved to a shard added by a reload.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use memshift_tests::ops_support::{metric, set_many, vm_rss_kib, wait_until};
use memshift_tests::verify::Miss;
use memshift_tests::{
    require_tools, Cluster, ClusterOptions, RedisClient, RedisServer, VerifyConfig, VerifyLoad,
    VerifyReport,
};

use super::{config_for, log_count, opts, reload, wait_log, BACK, DOWN, POLL};

/// memshift's `[redis] timeout_ms` here: a stopped shard fails requests
/// after this long, well inside the client's 5 s.
const REDIS_TIMEOUT_MS: u64 = 1000;
/// Ops the load must complete in each phase (a phase that cannot reach it
/// within `PHASE` fails: the load stalled).
const PHASE_OPS: u64 = 1000;
const PHASE: Duration = Duration::from_secs(30);

fn cluster(shards: usize, server_extra: &str, redis_extra: &str) -> (Cluster, ClusterOptions) {
    let o = ClusterOptions {
        timeout_ms: REDIS_TIMEOUT_MS,
        ..opts(shards, server_extra, redis_extra)
    };
    (Cluster::start_with(o.clone()), o)
}

fn load(cluster: &Cluster, prefix: &str) -> VerifyLoad {
    VerifyLoad::start(cluster.addr(), prefix, VerifyConfig::default())
}

/// Lets the load complete `n` more ops; fails if it cannot.
fn run_ops(load: &VerifyLoad, n: u64, what: &str) {
    assert!(
        load.wait_ops(n, PHASE),
        "the verifying load did not complete {n} ops within {PHASE:?} ({what}); {} ops so far",
        load.ops()
    );
}

/// The shard each key lives on with every shard in the ring: each key is
/// deleted everywhere, set through memshift, and looked up (run after the
/// load has stopped).
fn placement(cluster: &Cluster, keys: &[String]) -> HashMap<String, usize> {
    let mut redis: Vec<RedisClient> = cluster.shards.iter().map(RedisServer::client).collect();
    for k in keys {
        for r in &mut redis {
            r.cmd(&[b"DEL", k.as_bytes()]).expect("DEL");
        }
    }
    let items: Vec<(String, Vec<u8>)> = keys.iter().map(|k| (k.clone(), b"p".to_vec())).collect();
    set_many(&mut cluster.client(), &items).expect("set the probes");
    keys.iter()
        .map(|k| {
            let on: Vec<usize> = (0..redis.len())
                .filter(|&i| {
                    let exists = redis[i].cmd(&[b"EXISTS", k.as_bytes()]).expect("EXISTS");
                    exists.as_int() == Some(1)
                })
                .collect();
            assert_eq!(on.len(), 1, "{k} is on shards {on:?}");
            (k.clone(), on[0])
        })
        .collect()
}

/// Misses split into allowed ones (`allowed(miss, shard)`) and lost
/// acknowledged writes.
fn split_misses<'a>(
    r: &'a VerifyReport,
    place: &HashMap<String, usize>,
    allowed: impl Fn(&Miss, usize) -> bool,
) -> (Vec<&'a Miss>, Vec<String>) {
    let (mut ok, mut lost) = (Vec::new(), Vec::new());
    for m in &r.misses {
        let shard = place[&m.key];
        if allowed(m, shard) {
            ok.push(m);
        } else {
            lost.push(format!(
                "{} (shard {shard}): acknowledged s{} then missed {:?} later",
                m.key,
                m.acked_seq,
                m.seen_at.duration_since(m.acked_at)
            ));
        }
    }
    (ok, lost)
}

/// SERVER_ERRORs of requests none of whose keys is on a shard in `failed`
/// (a multi-get with one key on a failed shard fails as a whole: memshift
/// never answers part of a get).
fn errors_off(r: &VerifyReport, place: &HashMap<String, usize>, failed: &[usize]) -> Vec<String> {
    r.errors
        .iter()
        .filter(|e| e.keys.iter().all(|k| !failed.contains(&place[k])))
        .map(|e| {
            format!(
                "{:?} (shards {:?}): {}",
                e.keys,
                shards_of(place, &e.keys),
                e.line
            )
        })
        .collect()
}

fn shards_of(place: &HashMap<String, usize>, keys: &[String]) -> Vec<usize> {
    keys.iter().map(|k| place[k]).collect()
}

fn assert_empty(list: &[String], what: &str) {
    assert!(
        list.is_empty(),
        "{}: {}; first ones: {:#?}",
        what,
        list.len(),
        &list[..list.len().min(10)]
    );
}

fn summary(name: &str, r: &VerifyReport, allowed: usize, lost_on_failed: usize) {
    eprintln!(
        "faults {name}: ops {} errors {} misses allowed {allowed} lost-on-failed-shard \
         {lost_on_failed} max latency {:?} p99 {:?}",
        r.ops,
        r.errors.len(),
        r.max_latency(),
        r.quantile(0.99)
    );
}

/// 1. A shard killed and restarted under `fail`: only its keys get errors
///    (a multi-get with one of them fails whole) while it is down, its keys
///    acknowledged before the restart may be gone, nothing else is lost.
#[test]
fn faults_fail_policy_kill_and_restart() {
    if !require_tools("faults_fail_policy_kill_and_restart", &["redis-server"]) {
        return;
    }
    const VICTIM: usize = 1;
    let (mut cluster, _) = cluster(
        3,
        "",
        "on_shard_down = \"fail\"\neject_after_failures = 1\nhealth_check_interval_ms = 200",
    );
    let load = load(&cluster, "vf");
    run_ops(&load, PHASE_OPS, "before the kill");
    let down = log_count(&cluster, DOWN);
    cluster.shards[VICTIM].stop();
    wait_log(&cluster, DOWN, down);
    run_ops(&load, PHASE_OPS, "with a shard killed");
    let back = log_count(&cluster, BACK);
    cluster.shards[VICTIM].restart();
    let restarted = Instant::now();
    wait_log(&cluster, BACK, back);
    run_ops(&load, 2 * PHASE_OPS, "after the restart");
    let r = load.stop();

    let place = placement(&cluster, &r.keys);
    r.assert_no_wrong_values("fail policy, shard killed");
    assert_empty(
        &errors_off(&r, &place, &[VICTIM]),
        "SERVER_ERRORs on keys of healthy shards",
    );
    let (lost_on_failed, lost) = split_misses(&r, &place, |m, shard| {
        shard == VICTIM && m.acked_at < restarted
    });
    assert_empty(
        &lost,
        "lost acknowledged writes (healthy shards, or after the restart)",
    );
    assert!(
        r.errors
            .iter()
            .any(|e| shards_of(&place, &e.keys) == vec![VICTIM; e.keys.len()]),
        "no request failed while a shard was dead: the kill was not exercised"
    );
    summary("fail/kill", &r, 0, lost_on_failed.len());
}

/// 2. Under `eject`: a shard killed and restarted, then another frozen
///    (SIGSTOP) and resumed. Their keys may miss (moved, cleaned before the
///    rejoin, or lost with the killed process); never stale, never lost on
///    a shard that stayed up.
#[test]
fn faults_eject_policy_kill_and_pause() {
    if !require_tools("faults_eject_policy_kill_and_pause", &["redis-server"]) {
        return;
    }
    const KILLED: usize = 1;
    const PAUSED: usize = 2;
    let (mut cluster, _) = cluster(
        3,
        "",
        "on_shard_down = \"eject\"\neject_after_failures = 1\nhealth_check_interval_ms = 200",
    );
    let load = load(&cluster, "ve");
    run_ops(&load, PHASE_OPS, "before the kill");

    let down = log_count(&cluster, DOWN);
    cluster.shards[KILLED].stop();
    wait_log(&cluster, DOWN, down);
    run_ops(&load, PHASE_OPS, "with a shard ejected");
    let back = log_count(&cluster, BACK);
    cluster.shards[KILLED].restart();
    wait_log(&cluster, BACK, back);
    run_ops(&load, PHASE_OPS, "after the killed shard rejoined");

    let down = log_count(&cluster, DOWN);
    cluster.shards[PAUSED].signal(libc::SIGSTOP);
    wait_log(&cluster, DOWN, down);
    run_ops(&load, PHASE_OPS, "with a shard frozen and ejected");
    let back = log_count(&cluster, BACK);
    cluster.shards[PAUSED].signal(libc::SIGCONT);
    wait_log(&cluster, BACK, back);
    run_ops(&load, 2 * PHASE_OPS, "after the frozen shard rejoined");
    let r = load.stop();

    let place = placement(&cluster, &r.keys);
    r.assert_no_wrong_values("eject policy, shard killed then frozen");
    let failed = [KILLED, PAUSED];
    assert_empty(
        &errors_off(&r, &place, &failed),
        "SERVER_ERRORs on keys of shards that never failed",
    );
    let (allowed, lost) = split_misses(&r, &place, |_, shard| failed.contains(&shard));
    assert_empty(
        &lost,
        "lost acknowledged writes on a shard that never failed",
    );
    let lost_on_killed = allowed.iter().filter(|m| place[&m.key] == KILLED).count();
    summary(
        "eject/kill+pause",
        &r,
        allowed.len() - lost_on_killed,
        lost_on_killed,
    );
}

/// 2b. Under `eject`, rejoins with the load on few keys, so a key is often
///     written through a fallback and read again within the same
///     millisecond: a shard frozen and resumed several times, then killed
///     (a later ejection, served by the fallbacks the earlier ones wrote
///     to). No read may return a value older than an acknowledged write:
///     not the rejoining shard's pre-ejection value in the instant the ring
///     switches back, not a fallback's copy that outlived the clean-up.
#[test]
fn faults_eject_rejoins_under_load_never_read_stale() {
    if !require_tools(
        "faults_eject_rejoins_under_load_never_read_stale",
        &["redis-server"],
    ) {
        return;
    }
    const VICTIM: usize = 1;
    const CYCLES: usize = 8;
    let (mut cluster, _) = cluster(
        3,
        "",
        "on_shard_down = \"eject\"\neject_after_failures = 1\nhealth_check_interval_ms = 50",
    );
    let cfg = VerifyConfig {
        clients: 16,
        keys_per_client: 2,
        ..VerifyConfig::default()
    };
    let load = VerifyLoad::start(cluster.addr(), "vj", cfg);
    run_ops(&load, PHASE_OPS, "before the first freeze");
    for cycle in 0..CYCLES {
        let down = log_count(&cluster, DOWN);
        cluster.shards[VICTIM].signal(libc::SIGSTOP);
        wait_log(&cluster, DOWN, down);
        run_ops(&load, PHASE_OPS, &format!("frozen, cycle {cycle}"));
        let back = log_count(&cluster, BACK);
        cluster.shards[VICTIM].signal(libc::SIGCONT);
        wait_log(&cluster, BACK, back);
        run_ops(&load, PHASE_OPS, &format!("rejoined, cycle {cycle}"));
    }
    let down = log_count(&cluster, DOWN);
    cluster.shards[VICTIM].stop();
    wait_log(&cluster, DOWN, down);
    run_ops(&load, 2 * PHASE_OPS, "killed");
    let r = load.stop();
    // Back in the ring, for `placement`.
    let back = log_count(&cluster, BACK);
    cluster.shards[VICTIM].restart();
    wait_log(&cluster, BACK, back);

    let place = placement(&cluster, &r.keys);
    r.assert_no_wrong_values("eject policy, rejoins under load");
    assert_empty(
        &errors_off(&r, &place, &[VICTIM]),
        "SERVER_ERRORs on keys of shards that never failed",
    );
    let (allowed, lost) = split_misses(&r, &place, |_, shard| shard == VICTIM);
    assert_empty(
        &lost,
        "lost acknowledged writes on a shard that never failed",
    );
    summary("eject/rejoins", &r, allowed.len(), 0);
}

/// 3. SIGHUP adds a shard under load: no errors; a key that moved to the
///    new shard may miss once, never reads stale.
#[test]
fn faults_reload_adds_shard() {
    if !require_tools("faults_reload_adds_shard", &["redis-server"]) {
        return;
    }
    let (mut cluster, o) = cluster(2, "", "");
    let load = load(&cluster, "vr");
    run_ops(&load, PHASE_OPS, "before the reload");
    let added = RedisServer::start();
    let mut addrs: Vec<String> = cluster.shards.iter().map(RedisServer::addr).collect();
    addrs.push(added.addr());
    reload(&cluster, &config_for(&cluster, &addrs, &o), "ok");
    run_ops(&load, 2 * PHASE_OPS, "after the reload");
    let r = load.stop();
    cluster.shards.push(added);
    let new_shard = cluster.shards.len() - 1;

    let place = placement(&cluster, &r.keys);
    r.assert_no_wrong_values("reload adding a shard");
    assert_empty(
        &r.errors
            .iter()
            .map(|e| format!("{:?}: {}", e.keys, e.line))
            .collect::<Vec<_>>(),
        "SERVER_ERRORs across a reload",
    );
    let (moved, lost) = split_misses(&r, &place, |_, shard| shard == new_shard);
    assert_empty(&lost, "lost acknowledged writes on keys that did not move");
    assert!(
        place.values().any(|&s| s == new_shard),
        "no key moved to the new shard: {place:?}"
    );
    summary("reload/add-shard", &r, moved.len(), 0);
}

/// 4. SIGTERM under load: each client gets its replies, then EOF; a request
///    left unanswered was sent about when the signal came (not read yet);
///    memshift exits 0.
#[test]
fn faults_sigterm_drain() {
    if !require_tools("faults_sigterm_drain", &["redis-server"]) {
        return;
    }
    /// A request sent this long before SIGTERM has been read by memshift.
    const READ_BY: Duration = Duration::from_secs(2);
    let (mut cluster, _) = cluster(2, "drain_timeout_ms = 15000", "");
    let load = VerifyLoad::start(
        cluster.addr(),
        "vd",
        VerifyConfig {
            stop_on_close: true,
            ..VerifyConfig::default()
        },
    );
    run_ops(&load, 2 * PHASE_OPS, "before SIGTERM");
    let signalled = Instant::now();
    cluster.memshift.sigterm();
    wait_until(
        Duration::from_secs(30),
        POLL,
        "every client to see EOF",
        || load.finished().then_some(()),
    );
    let r = load.stop();
    let status = cluster
        .memshift
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("memshift still running after the drain"));
    assert_eq!(
        status.code(),
        Some(0),
        "exit after SIGTERM: {status}\n{}",
        cluster.memshift.stderr()
    );
    r.assert_no_wrong_values("SIGTERM drain");
    assert_eq!(
        r.closed_by_server,
        VerifyConfig::default().clients,
        "clients whose connection memshift closed"
    );
    let bad: Vec<String> = r
        .unanswered_at_close
        .iter()
        .filter(|u| u.partial || u.sent_at + READ_BY < signalled)
        .map(|u| {
            format!(
                "{}: partial {}, sent {:?} before SIGTERM",
                u.request,
                u.partial,
                signalled.saturating_duration_since(u.sent_at)
            )
        })
        .collect();
    assert_empty(
        &bad,
        "requests read before SIGTERM but not answered (or cut)",
    );
    assert_empty(
        &r.errors
            .iter()
            .map(|e| format!("{:?}: {}", e.keys, e.line))
            .collect::<Vec<_>>(),
        "SERVER_ERRORs during the drain",
    );
    let lost: Vec<String> = r.misses.iter().map(|m| m.key.clone()).collect();
    assert_empty(&lost, "lost acknowledged writes");
    let earliest = r
        .unanswered_at_close
        .iter()
        .map(|u| signalled.saturating_duration_since(u.sent_at))
        .max()
        .unwrap_or_default();
    eprintln!(
        "faults drain: {} requests unanswered at close (not read yet: the earliest sent {earliest:?} \
         before SIGTERM)",
        r.unanswered_at_close.len()
    );
    summary("sigterm/drain", &r, 0, 0);
}

/// 5. A slow consumer (pipelines gets of a 64 KB value, never reads) while
///    the verifying clients run: no wrong values, every request answered
///    within the timeout; their latency is printed, not bounded.
#[test]
fn faults_slow_consumer_beside_verifying_clients() {
    if !require_tools(
        "faults_slow_consumer_beside_verifying_clients",
        &["redis-server"],
    ) {
        return;
    }
    /// Stop flooding past this RSS growth: protects the shared machine.
    const RSS_GUARD_KIB: u64 = 400 * 1024;
    const FLOOD: Duration = Duration::from_secs(5);
    let (cluster, _) = cluster(2, "", "");
    let pid = cluster.memshift.pid().expect("memshift pid");
    let big = vec![b'z'; 64 * 1024];
    cluster.client().set("slow:big", &big).expect("set");
    let rss_before = vm_rss_kib(pid);
    let load = load(&cluster, "vs");
    run_ops(&load, PHASE_OPS / 2, "before the slow consumer");

    // One slow consumer after another: memshift closes each one at
    // `max_pending_replies`, the next one keeps the pressure on.
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (addr, stop) = (cluster.addr().to_string(), stop.clone());
        thread::spawn(move || slow_consumers(&addr, &stop))
    };
    let flood_start = Instant::now();
    let mut peak = rss_before;
    let ops_before = load.ops();
    // The flood runs beside the load for at least FLOOD and PHASE_OPS ops
    // (bounded by PHASE).
    let deadline = Instant::now() + PHASE;
    while (load.ops() < ops_before + PHASE_OPS || flood_start.elapsed() < FLOOD)
        && Instant::now() < deadline
        && !load.finished()
    {
        peak = peak.max(vm_rss_kib(pid));
        if peak.saturating_sub(rss_before) > RSS_GUARD_KIB {
            break;
        }
        thread::sleep(POLL);
    }
    let during = load.ops() - ops_before;
    let flooded = flood_start.elapsed();
    let flood_end = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let (consumers, written) = flood.join().expect("slow consumer panicked");
    run_ops(&load, PHASE_OPS / 2, "after the slow consumer");
    let r = load.stop();

    let closed = metric(cluster.admin_port, "memshift_slow_consumers_total");
    eprintln!(
        "faults slow consumer: {consumers} slow consumers wrote {written} gets of 64 KB in \
         {flooded:?}; memshift closed {closed}; {during} verifying ops during the flood; \
         RSS {} MiB -> peak {} MiB",
        rss_before / 1024,
        peak / 1024
    );
    let (n, p99, max) = r.window(flood_start, flood_end);
    eprintln!(
        "faults slow consumer: verifying clients during the flood: {n} requests, p99 {p99:?}, \
         max {max:?}"
    );
    r.assert_no_wrong_values("slow consumer beside the verifying clients");
    assert_empty(
        &r.errors
            .iter()
            .map(|e| format!("{:?}: {}", e.keys, e.line))
            .collect::<Vec<_>>(),
        "SERVER_ERRORs beside a slow consumer",
    );
    let lost: Vec<String> = r.misses.iter().map(|m| m.key.clone()).collect();
    assert_empty(&lost, "lost acknowledged writes");
    summary("slow-consumer", &r, 0, 0);
}

/// Slow consumers one after another until `stop`: each pipelines
/// `get slow:big` and never reads, until memshift closes it. Returns how
/// many connected and the gets they wrote.
fn slow_consumers(addr: &str, stop: &AtomicBool) -> (usize, usize) {
    const MAX_CONSUMERS: usize = 50;
    let (mut consumers, mut written) = (0, 0);
    while consumers < MAX_CONSUMERS && !stop.load(Ordering::Relaxed) {
        let Ok(s) = TcpStream::connect(addr) else {
            thread::sleep(POLL);
            continue;
        };
        consumers += 1;
        written += slow_consumer(s, stop);
    }
    (consumers, written)
}

/// One slow consumer: the gets written until `stop` or the connection
/// breaks.
fn slow_consumer(mut s: TcpStream, stop: &AtomicBool) -> usize {
    const PER_WRITE: usize = 500;
    const MAX_GETS: usize = 1_000_000;
    if s.set_write_timeout(Some(Duration::from_millis(200)))
        .is_err()
    {
        return 0;
    }
    let chunk = "get slow:big\r\n".repeat(PER_WRITE).into_bytes();
    let (mut written, mut off) = (0, 0);
    while written < MAX_GETS && !stop.load(Ordering::Relaxed) {
        match s.write(&chunk[off..]) {
            Ok(0) => break,
            Ok(n) => {
                off += n;
                if off == chunk.len() {
                    (written, off) = (written + PER_WRITE, 0);
                }
            }
            // memshift stopped reading it: keep the pressure on.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
    }
    written
}

//! SIGHUP: shards added and removed under load, invalid files refused,
//! settings that need a restart reported.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use memshift_tests::ops_support::{
    accepts_connections, mc_stats, pause_redis, set_many, wait_until,
};
use memshift_tests::{
    escape, free_port, require_tools, Cluster, ClusterOptions, McClient, RedisServer, Unit,
};

use super::{
    assert_get, config_for, key, opts, reload, reloads, value, write_and_place, POLL, REACT,
};

const LOAD_THREADS: usize = 4;
/// Keys per pipelined batch (that many sets, then that many gets).
const BATCH: usize = 4;
/// Batches each load thread completes before the reload, and after it.
const BATCHES_EACH_SIDE: u64 = 25;

/// What the load threads saw.
#[derive(Default)]
struct LoadLog {
    /// Anything but the expected reply, or a broken connection.
    errors: Vec<String>,
    /// A `get` that missed right after its `set` in the same pipeline: only
    /// allowed for a key the reload moved, in the batch the reload split.
    misses: Vec<String>,
}

/// One load thread: pipelined batches of `set k v` then `get k` on its own
/// connection, checking every reply, until `stop`.
fn load_loop(
    addr: String,
    t: usize,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    log: Arc<Mutex<LoadLog>>,
) {
    let fail = |msg: String| log.lock().unwrap().errors.push(msg);
    let mut c = match McClient::connect(&addr) {
        Ok(c) => c,
        Err(e) => return fail(format!("thread {t}: connect: {e}")),
    };
    let mut seq = 0usize;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let keys: Vec<String> = (0..BATCH)
            .map(|j| format!("load:{t}:{}", (seq * BATCH + j) % 300))
            .collect();
        let values: Vec<String> = (0..BATCH).map(|j| format!("v{t}-{seq}-{j}")).collect();
        let mut req = Vec::new();
        for (k, v) in keys.iter().zip(&values) {
            req.extend_from_slice(format!("set {k} 0 0 {}\r\n{v}\r\n", v.len()).as_bytes());
        }
        for k in &keys {
            req.extend_from_slice(format!("get {k}\r\n").as_bytes());
        }
        if let Err(e) = c.send(&req) {
            return fail(format!("thread {t} batch {seq}: send: {e}"));
        }
        for k in &keys {
            match c.read_reply() {
                Ok(r) if r.len() == 1 && r[0].is_line(b"STORED\r\n") => {}
                Ok(r) => fail(format!("thread {t}: set {k}: {}", render(&r))),
                Err(e) => return fail(format!("thread {t}: set {k}: connection: {e}")),
            }
        }
        for (k, v) in keys.iter().zip(&values) {
            match c.read_reply() {
                Ok(r) => match r.as_slice() {
                    [Unit::Value { .. }, end] if end.is_line(b"END\r\n") => {
                        if r[0].data() != Some(v.as_bytes()) {
                            fail(format!("thread {t}: get {k}: {} (want {v})", render(&r)));
                        }
                    }
                    [end] if end.is_line(b"END\r\n") => log.lock().unwrap().misses.push(k.clone()),
                    _ => fail(format!("thread {t}: get {k}: {}", render(&r))),
                },
                Err(e) => return fail(format!("thread {t}: get {k}: connection: {e}")),
            }
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
}

fn render(units: &[Unit]) -> String {
    escape(&units.iter().flat_map(Unit::raw).collect::<Vec<u8>>(), 200)
}

fn dbsizes(shards: &[RedisServer]) -> Vec<i64> {
    shards.iter().map(RedisServer::dbsize).collect()
}

#[test]
fn reload_adds_shard_under_load_without_errors() {
    if !require_tools(
        "reload_adds_shard_under_load_without_errors",
        &["redis-server"],
    ) {
        return;
    }
    let o = opts(2, "", "");
    let mut cluster = Cluster::start_with(o.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(LoadLog::default()));
    let counters: Vec<Arc<AtomicU64>> = (0..LOAD_THREADS)
        .map(|_| Arc::new(AtomicU64::new(0)))
        .collect();
    let threads: Vec<_> = (0..LOAD_THREADS)
        .map(|t| {
            let (addr, stop, done, log) = (
                cluster.addr().to_string(),
                stop.clone(),
                counters[t].clone(),
                log.clone(),
            );
            thread::spawn(move || load_loop(addr, t, stop, done, log))
        })
        .collect();
    let wait_batches = |floor: &[u64], what: &str| {
        wait_until(Duration::from_secs(60), POLL, what, || {
            let errors = log.lock().unwrap().errors.len();
            let ok = counters
                .iter()
                .zip(floor)
                .all(|(c, f)| c.load(Ordering::Relaxed) >= f + BATCHES_EACH_SIDE);
            (ok || errors > 0).then_some(())
        })
    };
    wait_batches(&[0; LOAD_THREADS], "the load to warm up");

    // Add a third shard while the load runs.
    let added = RedisServer::start();
    let mut addrs: Vec<String> = cluster.shards.iter().map(RedisServer::addr).collect();
    addrs.push(added.addr());
    let three = config_for(&cluster, &addrs, &o);
    reload(&cluster, &three, "ok");
    let after: Vec<u64> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    wait_batches(&after, "the load to run on the new ring");
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("load thread panicked");
    }
    cluster.shards.push(added);
    let new_shard = cluster.shards.len() - 1;

    let log = std::mem::take(&mut *log.lock().unwrap());
    assert!(
        log.errors.is_empty(),
        "{} client errors while a shard was added by SIGHUP; first ones: {:#?}",
        log.errors.len(),
        &log.errors[..log.errors.len().min(10)]
    );
    assert_eq!(
        reloads(&cluster, "error"),
        0.0,
        "{}",
        cluster.memshift.stderr()
    );
    assert!(
        cluster.memshift.stderr().contains("config reloaded"),
        "no 'config reloaded' log line:\n{}",
        cluster.memshift.stderr()
    );
    // A get that missed must be explained by the reload: its key moved to the
    // new shard between its set and its get (at most one batch per thread).
    assert!(
        log.misses.len() <= LOAD_THREADS * BATCH,
        "{} gets missed right after their set: {:?}",
        log.misses.len(),
        log.misses
    );
    eprintln!(
        "reload under load: {} batches, {} gets missed across the reload",
        counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>(),
        log.misses.len()
    );
    let mut c = cluster.client();
    for k in &log.misses {
        for s in &cluster.shards {
            s.cmd(&[b"DEL", k.as_bytes()]);
        }
        c.set(k, b"probe").expect("set a missed key again");
        assert_eq!(
            cluster.shard_holding(k.as_bytes()),
            Some(new_shard),
            "get {k} missed right after its set during the reload, but the key did not move to the new shard"
        );
    }

    // New keys are placed by the new ring: the new shard gets its share.
    let before = dbsizes(&cluster.shards);
    const N: usize = 1500;
    let items: Vec<(String, Vec<u8>)> = (0..N)
        .map(|i| (key("placed", i), value("placed", i, 0)))
        .collect();
    set_many(&mut c, &items).expect("set new keys after the reload");
    let delta: Vec<i64> = dbsizes(&cluster.shards)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    assert_eq!(
        delta.iter().sum::<i64>(),
        N as i64,
        "new keys per shard: {delta:?}"
    );
    for (i, d) in delta.iter().enumerate() {
        let share = *d as f64 / N as f64;
        assert!(
            (0.2..=0.47).contains(&share),
            "shard {i} got {d} of {N} new keys ({share:.2}); expected about 1/3 each: {delta:?}"
        );
    }
    for (k, v) in items.iter().step_by(50) {
        assert_get(&mut c, k, Some(v), "after the reload");
    }
}

#[test]
fn reload_removes_shard_in_flight_requests_finish() {
    if !require_tools(
        "reload_removes_shard_in_flight_requests_finish",
        &["redis-server"],
    ) {
        return;
    }
    // The shard's requests are paused for longer than a reload takes; the
    // request timeout is longer still.
    let o = ClusterOptions {
        timeout_ms: 8000,
        ..opts(3, "", "")
    };
    let cluster = Cluster::start_with(o.clone());
    const N: usize = 240;
    let placement = write_and_place(&cluster, "rm", N, 0);
    let victim = 2;
    let on_victim: Vec<usize> = (0..N).filter(|&i| placement[i] == victim).collect();
    let elsewhere: Vec<usize> = (0..N).filter(|&i| placement[i] != victim).collect();
    assert!(
        on_victim.len() >= 20,
        "only {} keys on shard {victim}",
        on_victim.len()
    );
    let inflight: Vec<usize> = on_victim[..20].to_vec();

    // Requests routed to the victim, stuck there while it is removed.
    let mut stats = cluster.client();
    let base = cmd_get(&mut stats);
    pause_redis(&cluster.shards[victim], 3000);
    let paused_at = Instant::now();
    let mut c = cluster.client();
    let mut req = Vec::new();
    for &i in &inflight {
        req.extend_from_slice(format!("get {}\r\n", key("rm", i)).as_bytes());
    }
    c.send(&req).expect("send gets");
    wait_until(REACT, POLL, "memshift to dispatch the gets", || {
        (cmd_get(&mut stats) >= base + inflight.len() as u64).then_some(())
    });
    let addrs: Vec<String> = cluster.shards[..victim]
        .iter()
        .map(RedisServer::addr)
        .collect();
    reload(&cluster, &config_for(&cluster, &addrs, &o), "ok");
    let reloaded_after = paused_at.elapsed();
    for &i in &inflight {
        let units = c.read_reply().unwrap_or_else(|e| {
            panic!(
                "get {} in flight on the removed shard: no reply: {e}",
                key("rm", i)
            )
        });
        let want = value("rm", i, 0);
        assert!(
            matches!(units.as_slice(), [v @ Unit::Value { .. }, end]
                if end.is_line(b"END\r\n") && v.data() == Some(&want[..])),
            "get {} in flight on the removed shard (reload done {reloaded_after:?} into a 3 s pause): {}",
            key("rm", i),
            render(&units)
        );
    }

    // The removed shard's keys now live elsewhere; the others did not move.
    let victim_size = cluster.shards[victim].dbsize();
    for &i in &on_victim {
        assert_get(&mut c, &key("rm", i), None, "its shard was removed");
        c.set(&key("rm", i), &value("rm", i, 1))
            .expect("set after removal");
        assert_get(
            &mut c,
            &key("rm", i),
            Some(&value("rm", i, 1)),
            "after removal",
        );
    }
    assert_eq!(
        cluster.shards[victim].dbsize(),
        victim_size,
        "keys were written to the removed shard"
    );
    for &i in &elsewhere {
        assert_get(
            &mut c,
            &key("rm", i),
            Some(&value("rm", i, 0)),
            "on a shard that stayed",
        );
    }
}

fn cmd_get(c: &mut McClient) -> u64 {
    mc_stats(c)
        .expect("stats")
        .get("cmd_get")
        .and_then(|v| v.parse().ok())
        .expect("stats has cmd_get")
}

#[test]
fn invalid_reload_keeps_the_running_config() {
    if !require_tools("invalid_reload_keeps_the_running_config", &["redis-server"]) {
        return;
    }
    let o = opts(2, "", "");
    let mut cluster = Cluster::start_with(o.clone());
    const N: usize = 100;
    let placement = write_and_place(&cluster, "inv", N, 0);
    let spare = RedisServer::start();
    let old_addrs: Vec<String> = cluster.shards.iter().map(RedisServer::addr).collect();

    let check_old_config_serves = |cluster: &Cluster, round: u32, what: &str| {
        let mut c = cluster.client();
        for i in 0..N {
            assert_get(
                &mut c,
                &key("inv", i),
                Some(&value("inv", i, round - 1)),
                what,
            );
        }
        // New keys are still placed by the old ring (nothing on the spare).
        let prefix = format!("inv{round}");
        write_and_place(cluster, &prefix, N, 0);
        assert_eq!(
            spare.dbsize(),
            0,
            "{what}: keys went to a shard of the refused config"
        );
        // Same placement as before the refused reload.
        let again = write_and_place(cluster, "inv", N, round);
        assert_eq!(again, placement, "{what}: keys moved");
    };

    // 1. Not TOML.
    let before_err = cluster.memshift.stderr().len();
    let broken = format!(
        "[server\nlisten = \"{}\"\n[redis]\nshards = [\"{}\"]\n",
        cluster.addr(),
        spare.addr()
    );
    reload(&cluster, &broken, "error");
    let log = cluster.memshift.stderr()[before_err..].to_string();
    assert!(
        log.contains("reload refused") && log.contains("ERROR"),
        "no error logged for a syntax error:\n{log}"
    );
    check_old_config_serves(&cluster, 1, "after a reload with a syntax error");

    // 2. Valid TOML, invalid value: a duplicate shard (plus the spare, which
    // must not be used either).
    let before_err = cluster.memshift.stderr().len();
    let mut dup = old_addrs.clone();
    dup.push(spare.addr());
    dup.push(old_addrs[0].clone());
    reload(&cluster, &config_for(&cluster, &dup, &o), "error");
    let log = cluster.memshift.stderr()[before_err..].to_string();
    assert!(
        log.contains("reload refused") && log.contains("duplicate shard"),
        "no error logged for a duplicate shard:\n{log}"
    );
    check_old_config_serves(&cluster, 2, "after a reload with a duplicate shard");
    assert_eq!(reloads(&cluster, "error"), 2.0);
    assert_eq!(reloads(&cluster, "ok"), 0.0);
    assert!(cluster.memshift.is_running());

    // 3. The reloader still works: a valid file is applied.
    let mut three = old_addrs.clone();
    three.push(spare.addr());
    reload(&cluster, &config_for(&cluster, &three, &o), "ok");
    let mut c = cluster.client();
    let items: Vec<(String, Vec<u8>)> = (0..300)
        .map(|i| (key("inv3", i), value("inv3", i, 0)))
        .collect();
    set_many(&mut c, &items).expect("set after a valid reload");
    assert!(
        spare.dbsize() > 0,
        "the valid reload after two refused ones did not add the shard"
    );
    cluster.shards.push(spare);
}

/// The listen address of the `[server]` table replaced by `127.0.0.1:port`.
fn with_listen(config: &str, old: &str, port: u16) -> String {
    let old_line = format!("listen = \"{old}\"");
    assert!(config.contains(&old_line));
    config.replacen(&old_line, &format!("listen = \"127.0.0.1:{port}\""), 1)
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn listen_change_needs_restart_and_keeps_old_listener() {
    if !require_tools(
        "listen_change_needs_restart_and_keeps_old_listener",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = Cluster::start_with(opts(1, "", ""));
    let mut c = cluster.client();
    c.set("before", b"1").expect("set");
    let new_port = free_port();
    let moved = with_listen(&cluster.config, cluster.addr(), new_port);
    reload(&cluster, &moved, "ok");
    wait_until(REACT, POLL, "a 'needs restart' log line", || {
        let log = cluster.memshift.stderr();
        (log.contains("need a restart") && log.contains("server.listen")).then_some(())
    });
    // Old listener: the open connection and new ones keep working.
    assert_get(&mut c, "before", Some(b"1"), "after the listen change");
    let mut fresh = cluster.client();
    fresh
        .set("after", b"2")
        .expect("set on a new connection to the old listener");
    assert_get(&mut fresh, "after", Some(b"2"), "new connection");
    assert!(
        !accepts_connections(&format!("127.0.0.1:{new_port}")),
        "memshift listens on the new address without a restart"
    );
}

#[test]
fn needs_restart_is_reported_again_on_the_next_reload() {
    if !require_tools(
        "needs_restart_is_reported_again_on_the_next_reload",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = Cluster::start_with(opts(1, "", ""));
    let moved = with_listen(&cluster.config, cluster.addr(), free_port());
    reload(&cluster, &moved, "ok");
    let first = count(&cluster.memshift.stderr(), "need a restart");
    assert_eq!(first, 1, "{}", cluster.memshift.stderr());
    // The same file again: the running listener still differs from it.
    reload(&cluster, &moved, "ok");
    let log = cluster.memshift.stderr();
    assert_eq!(
        count(&log, "need a restart"),
        2,
        "a second SIGHUP with server.listen still different from the running listener \
         must report it again, not ignore it silently:\n{log}"
    );
    // Back to the running address: nothing needs a restart any more.
    reload(&cluster, &cluster.config, "ok");
    let log = cluster.memshift.stderr();
    assert_eq!(
        count(&log, "need a restart"),
        2,
        "reverting server.listen to the running address is reported as needing a restart:\n{log}"
    );
}

#[test]
fn reload_changes_shard_weights() {
    if !require_tools("reload_changes_shard_weights", &["redis-server"]) {
        return;
    }
    let cluster = Cluster::start_with(opts(2, "", ""));
    let (r0, r1) = (cluster.shards[0].addr(), cluster.shards[1].addr());
    let even = format!("shards = [\"{r0}\", \"{r1}\"]");
    assert!(cluster.config.contains(&even), "{}", cluster.config);
    let weighted = cluster.config.replace(
        &even,
        &format!("shards = [{{ addr = \"{r0}\", weight = 3 }}, \"{r1}\"]"),
    );
    let mut kept = cluster.client();
    kept.set("weights:kept", b"1").expect("set");
    reload(&cluster, &weighted, "ok");

    let before = dbsizes(&cluster.shards);
    const N: usize = 1200;
    let items: Vec<(String, Vec<u8>)> = (0..N)
        .map(|i| (key("weighted", i), value("weighted", i, 0)))
        .collect();
    // On the connection opened before the reload.
    set_many(&mut kept, &items).expect("set after the weight change");
    let delta: Vec<i64> = dbsizes(&cluster.shards)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    let share = delta[0] as f64 / N as f64;
    assert!(
        (0.62..=0.88).contains(&share),
        "shard 0 with weight 3 of 4 got {share:.2} of the new keys: {delta:?}"
    );
}

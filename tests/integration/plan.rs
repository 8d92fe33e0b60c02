//! `memshift plan` (issue 28) against real memcached and Redis: for three
//! pools its `--json` estimate is checked against the `used_memory` growth
//! of the Redis shards after `memshift copy` of the same pool (calibrated
//! within ±10%, formula within ±20%); a dead or foreign server fails fast
//! with one line.
//!
//! Pools: 100,000 items of 100 B; 10,000 items of 1–64 KiB (scaled down
//! from 100,000: that pool would hold 3.3 GB in memcached and as much again
//! in Redis on a shared test box); 100,000 sessions of 4 KiB with one-hour
//! TTLs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memshift_tests::migration_support::{
    mc_load, mc_settle, migration_config, LoadItem, MigrationOptions,
};
use memshift_tests::{
    free_port, memshift_bin, require_tools, run_with_timeout, CommandOutput, Memcached, RedisServer,
};

const REDIS_SHARDS: usize = 2;
/// Items generated and loaded at a time (the 4 KiB pool is 400 MB).
const LOAD_CHUNK: usize = 2_000;

fn tools(test: &str) -> bool {
    require_tools(test, &["redis-server", "memcached"])
}

fn memshift(args: &[&str], config: &Path, timeout: Duration) -> CommandOutput {
    let mut cmd = Command::new(memshift_bin());
    cmd.arg(args[0])
        .arg("--config")
        .arg(config)
        .args(&args[1..]);
    run_with_timeout(cmd, timeout).unwrap_or_else(|e| panic!("{e}"))
}

/// `INFO memory`'s `used_memory`.
fn used_memory(shard: &RedisServer) -> i64 {
    let info = shard.cmd(&[b"INFO".as_slice(), b"memory".as_slice()]);
    let text = match info {
        memshift_tests::Resp::Bulk(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO memory: {other:?}"),
    };
    text.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no used_memory in {text}"))
}

/// `used_memory` summed over the shards once it holds still (the dicts'
/// incremental rehash and closed clients' buffers settle within a second).
fn settled_used_memory(shards: &[RedisServer]) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = shards.iter().map(used_memory).sum::<i64>();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = shards.iter().map(used_memory).sum::<i64>();
        if now == last || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

/// Loads `count` items made by `item` into memcached, a chunk at a time.
fn fill(mc: &Memcached, count: usize, item: impl Fn(usize) -> LoadItem) {
    for start in (0..count).step_by(LOAD_CHUNK) {
        let chunk: Vec<LoadItem> = (start..count.min(start + LOAD_CHUNK)).map(&item).collect();
        mc_load(&mc.addr(), &chunk);
    }
    mc_settle(&mc.addr());
}

/// A config over `redis` and the pool `memcached` (phase warmup; the
/// listen ports are never bound: `plan` and `copy` do not serve).
fn write_config(dir: &Path, redis: &[String], memcached: &[String]) -> PathBuf {
    let opts = MigrationOptions {
        phase: "warmup".into(),
        ..MigrationOptions::default()
    };
    let config = dir.join("plan.toml");
    let toml = migration_config(free_port(), free_port(), redis, memcached, &opts);
    std::fs::write(&config, toml).expect("write config");
    config
}

fn json_u64(v: &serde_json::Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing or not a number in {v}"))
}

/// Plan (with `args`), copy, compare. `count` items made by `item`,
/// memcached with `-m mb`.
fn plan_matches_copy(
    name: &str,
    count: usize,
    mb: u32,
    args: &[&str],
    item: impl Fn(usize) -> LoadItem,
) {
    let mc = Memcached::start_with_args(&["-m", &mb.to_string()]);
    let shards: Vec<RedisServer> = (0..REDIS_SHARDS).map(|_| RedisServer::start()).collect();
    let started = Instant::now();
    fill(&mc, count, item);
    eprintln!(
        "plan {name}: {count} items loaded in {:?}",
        started.elapsed()
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let redis: Vec<String> = shards.iter().map(RedisServer::addr).collect();
    let config = write_config(dir.path(), &redis, &[mc.addr()]);

    let plan_args: Vec<&str> = ["plan", "--json"].iter().chain(args).copied().collect();
    let out = memshift(&plan_args, &config, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "plan failed: {}\n{}",
        out.stderr,
        out.stdout
    );
    assert!(
        out.stderr.contains("plan: walk"),
        "no progress line: {}",
        out.stderr
    );
    let plan: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("plan --json is not one JSON object ({e}): {}", out.stdout));
    // All of them (nothing reads the pool while it is walked).
    assert_eq!(json_u64(&plan, "items"), count as u64, "{plan}");
    assert!(json_u64(&plan, "recommended_nodes") >= 1, "{plan}");
    let estimated = json_u64(&plan, "estimated_redis_bytes") as f64;
    let calibrated = json_u64(&plan, "calibrated_redis_bytes") as f64;
    // Calibration deleted its scratch keys.
    let leftover: i64 = shards.iter().map(RedisServer::dbsize).sum();
    assert_eq!(leftover, 0, "plan left keys in Redis");

    let before = settled_used_memory(&shards);
    let copied = memshift(&["copy"], &config, Duration::from_secs(180));
    assert!(copied.status.success(), "copy failed: {}", copied.stdout);
    let keys: i64 = shards.iter().map(RedisServer::dbsize).sum();
    assert_eq!(keys, count as i64, "copy: {}", copied.stdout);
    let growth = (settled_used_memory(&shards) - before) as f64;

    let off = |x: f64| 100.0 * (x - growth) / growth;
    eprintln!(
        "plan {name}: used_memory grew {growth:.0}; calibrated {calibrated:.0} ({:+.2}%), formula {estimated:.0} ({:+.2}%); {:?} in all",
        off(calibrated),
        off(estimated),
        started.elapsed()
    );
    assert!(
        off(calibrated).abs() <= 10.0,
        "calibrated {calibrated} vs growth {growth}: {plan}"
    );
    assert!(
        off(estimated).abs() <= 20.0,
        "formula {estimated} vs growth {growth}: {plan}"
    );
}

#[test]
fn plan_small_values() {
    if !tools("plan_small_values") {
        return;
    }
    plan_matches_copy("100 B", 100_000, 256, &[], |i| LoadItem {
        key: format!("user:{i}"),
        flags: (i % 3) as u32,
        exptime: 0,
        data: vec![b'v'; 100],
    });
}

#[test]
fn plan_mixed_large_values() {
    if !tools("plan_mixed_large_values") {
        return;
    }
    plan_matches_copy("1-64 KiB", 10_000, 1024, &["--sample", "2000"], |i| {
        // A fixed spread of sizes over 1..=64 KiB (a multiplicative hash).
        let len = 1024 + (i.wrapping_mul(2_654_435_761) % (63 * 1024 + 1));
        LoadItem {
            key: format!("blob:{i}"),
            flags: 0,
            exptime: 0,
            data: vec![b'b'; len],
        }
    });
}

#[test]
fn plan_sessions_with_ttls() {
    if !tools("plan_sessions_with_ttls") {
        return;
    }
    plan_matches_copy("4 KiB sessions", 100_000, 1024, &[], |i| LoadItem {
        key: format!("session:{i:08}"),
        flags: 0,
        exptime: 3_600,
        data: vec![b's'; 4096],
    });
}

/// Without a reachable Redis there is no calibrated figure: `null`, the
/// reason, and the formula's estimate still there; exit 0.
#[test]
fn plan_without_redis_reports_the_formula_only() {
    if !tools("plan_without_redis_reports_the_formula_only") {
        return;
    }
    let mc = Memcached::start();
    fill(&mc, 1_000, |i| LoadItem {
        key: format!("k:{i}"),
        flags: 0,
        exptime: 0,
        data: vec![b'v'; 100],
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let dead_redis = format!("127.0.0.1:{}", free_port());
    let config = write_config(dir.path(), &[dead_redis], &[mc.addr()]);
    let out = memshift(&["plan", "--json"], &config, Duration::from_secs(60));
    assert!(out.status.success(), "{}", out.stderr);
    let plan: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("json");
    assert!(plan["calibrated_redis_bytes"].is_null(), "{plan}");
    assert_eq!(plan["calibration_skipped"], "Redis not reachable", "{plan}");
    assert_eq!(json_u64(&plan, "items"), 1_000);
    // 100-byte values under keys of 3 to 5 bytes: value 16 + 128, key 8,
    // dict entry 32; plus the 1,024-bucket table.
    assert_eq!(
        json_u64(&plan, "estimated_redis_bytes"),
        1_000 * 184 + 8 * 1_024
    );
    assert_eq!(json_u64(&plan, "recommended_nodes"), 1);
}

/// A closed port, and a Redis where memcached should be: one line on
/// stderr, exit 1, within the 2 s deadline (and then some for a busy box).
#[test]
fn plan_fails_fast_on_a_dead_or_foreign_server() {
    if !tools("plan_fails_fast_on_a_dead_or_foreign_server") {
        return;
    }
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let dead = format!("127.0.0.1:{}", free_port());
    for (server, expected) in [
        (dead.as_str(), "unreachable"),
        (&redis.addr()[..], "is not a memcached server"),
    ] {
        let config = write_config(dir.path(), &[redis.addr()], &[server.to_owned()]);
        let started = Instant::now();
        let out = memshift(&["plan"], &config, Duration::from_secs(30));
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(1), "{server}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{server}: {:?}", out.stderr);
        assert!(
            out.stderr.starts_with("memshift: plan: ") && out.stderr.contains(expected),
            "{server}: {:?}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{server}: {}", out.stdout);
        assert!(took < Duration::from_secs(10), "{server}: took {took:?}");
    }
}

/// Latencies of one client's `get`s, one at a time, while `busy` runs.
fn probe_latency(mc: &Memcached, keys: usize, busy: impl FnOnce()) -> Vec<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (stop, addr) = (stop.clone(), mc.addr());
        std::thread::spawn(move || {
            let mut c = memshift_tests::McClient::connect(&addr).expect("connect");
            let mut lat = Vec::new();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                i = (i + 7_919) % keys;
                let t = Instant::now();
                c.request(format!("get k:{i}\r\n").as_bytes()).expect("get");
                lat.push(t.elapsed());
                std::thread::sleep(Duration::from_millis(1));
            }
            lat
        })
    };
    busy();
    stop.store(true, Ordering::Relaxed);
    let mut lat = probe.join().expect("probe thread");
    lat.sort();
    lat
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted
        .get(((sorted.len() as f64 - 1.0) * q) as usize)
        .copied()
        .unwrap_or_default()
}

/// The walk bound stated in docs/migration.md: `memshift plan` over
/// 1,000,000 items (default `--sample` and `--rate`) finishes within 60 s,
/// and another client's `get` latency (p99) stays within 5 ms of what it
/// is without the plan running. Fills 110 MB: run by hand with
/// `cargo test -p memshift-tests --test integration plan_walks -- --ignored --nocapture`.
#[test]
#[ignore = "fills 1,000,000 items; run by hand (docs/migration.md)"]
fn plan_walks_a_million_items_gently() {
    if !tools("plan_walks_a_million_items_gently") {
        return;
    }
    const ITEMS: usize = 1_000_000;
    let mc = Memcached::start_with_args(&["-m", "1024"]);
    let redis = RedisServer::start();
    fill(&mc, ITEMS, |i| LoadItem {
        key: format!("k:{i}"),
        flags: 0,
        exptime: 0,
        data: vec![b'v'; 100],
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(dir.path(), &[redis.addr()], &[mc.addr()]);

    let idle = probe_latency(&mc, ITEMS, || std::thread::sleep(Duration::from_secs(5)));
    let mut took = Duration::ZERO;
    let mut out = None;
    let busy = probe_latency(&mc, ITEMS, || {
        let started = Instant::now();
        out = Some(memshift(
            &["plan", "--json"],
            &config,
            Duration::from_secs(300),
        ));
        took = started.elapsed();
    });
    let out = out.expect("plan ran");
    assert!(out.status.success(), "{}", out.stderr);
    let plan: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("json");
    // The crawler passes over items a reader moves between LRU queues.
    let listed = json_u64(&plan, "items");
    assert!(
        listed <= ITEMS as u64 && listed >= ITEMS as u64 * 99 / 100,
        "{listed}"
    );
    let (idle99, busy99) = (quantile(&idle, 0.99), quantile(&busy, 0.99));
    eprintln!(
        "plan of {ITEMS} items: {took:?} (walk {}s); get latency p50/p99/max without plan {:?}/{:?}/{:?}, during plan {:?}/{:?}/{:?} ({} probes)",
        plan["walk_seconds"],
        quantile(&idle, 0.5),
        idle99,
        idle.last().copied().unwrap_or_default(),
        quantile(&busy, 0.5),
        busy99,
        busy.last().copied().unwrap_or_default(),
        busy.len()
    );
    assert!(took < Duration::from_secs(60), "plan took {took:?}");
    assert!(
        busy99 <= idle99 + Duration::from_millis(5),
        "p99 {busy99:?} during plan vs {idle99:?} without"
    );
}

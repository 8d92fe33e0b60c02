//! The canary split and the automatic rollback.
//!
//! Split: 10,000 keys hold "M" in memcached and "R" in Redis; a `get`
//! through memshift shows which backend is the key's primary. The keys
//! answering "R" must be exactly those `is_canary(key, 20)` names, about 20%
//! of them, the same for a second memshift and after a restart.
//!
//! Rollback: keys only in memcached, no backfill: Redis misses every canary
//! read, memcached hits every other one; memshift falls back to warmup
//! within one window and counts it.

use std::time::{Duration, Instant};

use memshift_shadow::canary::is_canary;
use memshift_tests::migration_support::{
    mc_load, pipelined_gets, redis_load, LoadItem, MigrationOptions, MigrationSetup, Proxy,
};

use super::*;

const KEYS: usize = 10_000;
const PCT: f64 = 20.0;

fn items(prefix: &str, n: usize, data: &str) -> Vec<LoadItem> {
    (0..n)
        .map(|i| LoadItem {
            key: format!("{prefix}{i}"),
            flags: 0,
            exptime: 0,
            data: data.as_bytes().to_vec(),
        })
        .collect()
}

/// Reads every key through `proxy` and checks the answering backend is the
/// one `is_canary` names. Returns how many answered from Redis.
fn check_split(proxy: &Proxy, keys: &[String], what: &str) -> usize {
    let answers = pipelined_gets(proxy.addr(), keys);
    let mut redis = 0;
    let mut wrong = Vec::new();
    for (k, a) in keys.iter().zip(&answers) {
        let from_redis = match a.as_ref().map(|(_, d)| d.as_slice()) {
            Some(b"R") => true,
            Some(b"M") => false,
            other => panic!("{what}: get {k} answered {other:?}"),
        };
        redis += from_redis as usize;
        if from_redis != is_canary(k.as_bytes(), PCT) {
            wrong.push(k.clone());
        }
    }
    assert!(
        wrong.is_empty(),
        "{what}: {} keys on the wrong side of the split (first {:?})",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    redis
}

#[test]
fn canary_split_is_20_percent_stable_across_restarts_and_proxies() {
    if !tools("canary_split_is_20_percent_stable_across_restarts_and_proxies") {
        return;
    }
    let opts = MigrationOptions {
        phase: "canary".into(),
        redis_shards: 3,
        // Rollback armed with a short window: Redis misses nothing here, so
        // it must not trigger (negative control).
        migration: "canary_percent = 20\nbackfill = false\nrollback_window_s = 2\nrollback_min_samples = 50\n"
            .into(),
        ..MigrationOptions::default()
    };
    let mut setup = MigrationSetup::start(opts.clone());
    let keys: Vec<String> = (0..KEYS).map(|i| format!("split:{i}")).collect();
    mc_load(&setup.memcached[0].addr(), &items("split:", KEYS, "M"));
    for shard in &setup.redis {
        redis_load(&shard.addr(), &items("split:", KEYS, "R"));
    }

    let redis = check_split(&setup.proxy, &keys, "first proxy");
    let share = redis as f64 * 100.0 / KEYS as f64;
    eprintln!("canary split: {redis} of {KEYS} keys ({share:.2}%) have Redis as primary");
    assert!(
        (PCT - 2.0..=PCT + 2.0).contains(&share),
        "canary share {share:.2}% not within 20% ± 2%"
    );

    // A second proxy over the same backends, and the first one restarted.
    let second = setup.another_proxy(&opts);
    assert_eq!(check_split(&second, &keys, "second proxy"), redis);
    setup.proxy.memshift.kill();
    setup.proxy = setup.another_proxy(&opts);
    assert_eq!(check_split(&setup.proxy, &keys, "restarted proxy"), redis);

    // Nobody rolled back: Redis missed nothing.
    for (p, name) in [(&second, "second"), (&setup.proxy, "restarted")] {
        let m = p.metrics();
        assert_eq!(
            m.value("memshift_rollbacks_total", &[]),
            0.0,
            "{name} proxy rolled back"
        );
        assert_eq!(
            m.value("memshift_migration_phase", &[("phase", "canary")]),
            1.0,
            "{name} proxy"
        );
    }
}

#[test]
fn canary_rolls_back_to_warmup_when_redis_misses_more() {
    if !tools("canary_rolls_back_to_warmup_when_redis_misses_more") {
        return;
    }
    const WINDOW_S: u64 = 2;
    const N: usize = 600;
    let setup = MigrationSetup::start(MigrationOptions {
        phase: "canary".into(),
        migration: format!(
            "canary_percent = 50\nbackfill = false\nrollback_miss_delta_pp = 5.0\n\
             rollback_window_s = {WINDOW_S}\nrollback_min_samples = 50\n"
        ),
        ..MigrationOptions::default()
    });
    let m = setup.metrics();
    assert_eq!(
        m.value("memshift_migration_phase", &[("phase", "canary")]),
        1.0
    );
    assert_eq!(m.value("memshift_rollbacks_total", &[]), 0.0);

    let keys: Vec<String> = (0..N).map(|i| format!("rb:{i}")).collect();
    mc_load(&setup.memcached[0].addr(), &items("rb:", N, "M"));
    let canary_keys = keys
        .iter()
        .filter(|k| is_canary(k.as_bytes(), 50.0))
        .count();
    assert!(
        canary_keys >= 100 && N - canary_keys >= 100,
        "{canary_keys} canary keys of {N}"
    );

    let answers = pipelined_gets(setup.proxy.addr(), &keys);
    let read_done = Instant::now();
    let hits = answers.iter().filter(|a| a.is_some()).count();
    assert_eq!(
        hits,
        N - canary_keys,
        "before the rollback only memcached-primary keys hit"
    );

    let port = setup.proxy.admin_port;
    wait_for("the rollback to warmup", Duration::from_secs(15), |last| {
        let m = memshift_tests::migration_support::scrape(port);
        *last = format!(
            "phase canary {} warmup {}, rollbacks {}",
            m.value("memshift_migration_phase", &[("phase", "canary")]),
            m.value("memshift_migration_phase", &[("phase", "warmup")]),
            m.value("memshift_rollbacks_total", &[])
        );
        (m.value("memshift_migration_phase", &[("phase", "warmup")]) == 1.0).then_some(())
    });
    let took = read_done.elapsed();
    eprintln!("rollback {took:?} after the reads (window {WINDOW_S} s)");
    // One window, plus the once-a-second check and a loaded machine.
    assert!(
        took <= Duration::from_secs(WINDOW_S + 2),
        "rollback took {took:?}, more than one window ({WINDOW_S} s) plus margin"
    );
    let m = setup.metrics();
    assert_eq!(
        m.value("memshift_rollbacks_total", &[]),
        1.0,
        "memshift_rollbacks_total"
    );
    assert_eq!(
        m.value("memshift_migration_phase", &[("phase", "canary")]),
        0.0
    );
    assert!(
        setup.proxy.memshift.stderr().contains("rollback"),
        "no log line explains the rollback:\n{}",
        setup.proxy.memshift.stderr()
    );

    // Warmup now: memcached answers every key; no second rollback.
    let answers = pipelined_gets(setup.proxy.addr(), &keys);
    assert!(answers
        .iter()
        .all(|a| a.as_ref().map(|(_, d)| d.as_slice()) == Some(b"M")));
    std::thread::sleep(Duration::from_millis(1200));
    let m = setup.metrics();
    assert_eq!(
        m.value("memshift_rollbacks_total", &[]),
        1.0,
        "rolled back once only"
    );
    assert_eq!(
        m.value("memshift_migration_phase", &[("phase", "warmup")]),
        1.0
    );

    // Until the operator reloads: then canary again (the counter stays).
    let mut setup = setup;
    setup.proxy.reload_phase("canary", "");
    let m = setup.metrics();
    assert_eq!(
        m.value("memshift_migration_phase", &[("phase", "warmup")]),
        0.0
    );
    assert_eq!(m.value("memshift_rollbacks_total", &[]), 1.0);
    let answers = pipelined_gets(setup.proxy.addr(), &keys[..100]);
    let want: Vec<bool> = keys[..100]
        .iter()
        .map(|k| !is_canary(k.as_bytes(), 50.0))
        .collect();
    let got: Vec<bool> = answers.iter().map(Option::is_some).collect();
    assert_eq!(got, want, "canary routing again after the reload");
}

//! Issue 6's checks end to end: known traffic gives exact counters in
//! `/metrics` and in memcached's `stats`; the exposition parses with a real
//! Prometheus parser; `memcstat` reads memshift's stats.

use std::process::Command;
use std::time::Duration;

use memshift_tests::env::require_tools;
use memshift_tests::ops_support::{mc_stats, metric_value, metrics_text, wait_until};
use memshift_tests::process::{run_with_timeout, Cluster};

/// M sets, N gets with H hits, then a get for a key on a stopped shard.
#[test]
fn known_traffic_gives_exact_counters_in_metrics_and_stats() {
    if !require_tools("known_traffic_gives_exact_counters", &["redis-server"]) {
        return;
    }
    let mut cluster = Cluster::start();
    let mut c = cluster.client();
    const SETS: usize = 7;
    const HITS: usize = 5;
    const MISSES: usize = 4;
    for i in 0..SETS {
        c.set(&format!("obs:{i}"), b"value").expect("set");
    }
    for i in 0..HITS {
        assert!(c.get(&format!("obs:{i}")).expect("get").is_some());
    }
    for i in 0..MISSES {
        assert!(c.get(&format!("obs:missing:{i}")).expect("get").is_none());
    }
    // One multi-get: 2 hits, 1 miss (cmd_get counts keys, requests_total requests).
    let reply = c
        .request_str(b"get obs:5 obs:6 obs:nope\r\n")
        .expect("multi-get");
    assert!(reply.ends_with("END\r\n"), "{reply}");

    let text = metrics_text(cluster.admin_port);
    let value = |series: &str| metric_value(&text, series).unwrap_or(-1.0);
    assert_eq!(
        value(r#"memshift_requests_total{protocol="text",command="set"}"#),
        SETS as f64
    );
    assert_eq!(
        value(r#"memshift_requests_total{protocol="text",command="get"}"#),
        (HITS + MISSES + 1) as f64
    );
    assert_eq!(
        value(r#"memshift_get_hits_total{backend="redis"}"#),
        (HITS + 2) as f64
    );
    assert_eq!(
        value(r#"memshift_get_misses_total{backend="redis"}"#),
        (MISSES + 1) as f64
    );
    assert_eq!(
        value(r#"memshift_request_duration_seconds_count{command="set"}"#),
        SETS as f64
    );
    assert_eq!(value("memshift_client_connections"), 1.0);

    let stats = mc_stats(&mut c).expect("stats");
    let stat = |name: &str| stats.get(name).cloned().unwrap_or_default();
    assert_eq!(stat("cmd_set"), SETS.to_string());
    assert_eq!(stat("cmd_get"), (HITS + MISSES + 3).to_string());
    assert_eq!(stat("get_hits"), (HITS + 2).to_string());
    assert_eq!(stat("get_misses"), (MISSES + 1).to_string());
    assert_eq!(stat("curr_connections"), "1");

    // A key on a stopped shard: an error reply, counted as a backend error,
    // and neither a hit nor a miss.
    let victim = (0..1000)
        .map(|i| format!("obs:victim:{i}"))
        .find(|k| {
            c.set(k, b"v").expect("set");
            cluster.shard_holding(k.as_bytes()) == Some(0)
        })
        .expect("a key on shard 0");
    let shard_label = cluster.shards[0].addr();
    cluster.shards[0].stop();
    let reply = c
        .request_str(format!("get {victim}\r\n").as_bytes())
        .expect("get on a stopped shard");
    // Answered as a miss (redis.read_errors_as_misses), counted as a
    // backend error and not as a backend miss.
    assert_eq!(reply, "END\r\n");
    let errors_series = format!(
        r#"memshift_backend_errors_total{{backend="redis",shard="{shard_label}",kind="connection"}}"#
    );
    let admin = cluster.admin_port;
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        "backend errors",
        || (metric_value(&metrics_text(admin), &errors_series).unwrap_or(0.0) >= 1.0).then_some(()),
    );
    let text = metrics_text(admin);
    assert_eq!(
        metric_value(&text, r#"memshift_get_misses_total{backend="redis"}"#),
        Some((MISSES + 1) as f64),
        "an error is not a miss"
    );
    assert_eq!(
        metric_value(
            &text,
            &format!(r#"memshift_backend_up{{backend="redis",shard="{shard_label}"}}"#)
        ),
        Some(0.0)
    );
    assert_eq!(
        metric_value(
            &text,
            &format!(r#"memshift_read_errors_as_misses_total{{shard="{shard_label}"}}"#)
        ),
        Some(1.0)
    );
    // `stats` counts what clients saw: the substituted miss too.
    let stats = mc_stats(&mut c).expect("stats");
    assert_eq!(stats.get("get_misses").map(String::as_str), Some("6"));
    assert_eq!(
        stats.get("read_errors_as_misses").map(String::as_str),
        Some("1")
    );
}

/// Every line of a live `/metrics` parses with a Prometheus parser, and the
/// contract's families are there.
#[test]
fn metrics_exposition_parses_with_a_prometheus_parser() {
    if !require_tools("metrics_exposition_parses", &["redis-server"]) {
        return;
    }
    let cluster = Cluster::start();
    let mut c = cluster.client();
    c.set("p:1", b"x").expect("set");
    c.get("p:1").expect("get");
    let text = metrics_text(cluster.admin_port);
    let lines: Vec<std::io::Result<String>> = text.lines().map(|l| Ok(l.to_string())).collect();
    let scrape = prometheus_parse::Scrape::parse(lines.into_iter()).expect("parses");
    let names: std::collections::HashSet<&str> =
        scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    for family in [
        "memshift_requests_total",
        "memshift_get_hits_total",
        "memshift_get_misses_total",
        "memshift_backend_errors_total",
        "memshift_backend_up",
        "memshift_client_connections",
        "memshift_client_connections_total",
        "memshift_rejected_connections_total",
        "memshift_shadow_writes_total",
        "memshift_shadow_breaker_open",
        "memshift_compare_total",
        "memshift_migration_phase",
        "memshift_rollbacks_total",
        "memshift_tls_handshakes_total",
    ] {
        assert!(names.contains(family), "{family} missing from /metrics");
    }
    // Pre-registered at 0: only a drain that times out counts.
    assert_eq!(
        metric_value(&text, "memshift_drain_aborted_connections_total"),
        Some(0.0),
        "memshift_drain_aborted_connections_total missing from /metrics or not 0"
    );
    // The duration is a histogram (buckets), not a summary.
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "memshift_request_duration_seconds"
                && matches!(s.value, prometheus_parse::Value::Histogram(_))),
        "memshift_request_duration_seconds is not a histogram"
    );
    // Every sample line was understood (the parser skips what it cannot read).
    let sample_lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .count();
    let bucket_lines = text
        .lines()
        .filter(|l| l.starts_with("memshift_request_duration_seconds"))
        .count();
    assert!(scrape.samples.len() + bucket_lines >= sample_lines);
}

/// `memcstat` (libmemcached-tools) reads memshift's `stats` without error.
#[test]
fn memcstat_reads_memshift_stats() {
    if !require_tools(
        "memcstat_reads_memshift_stats",
        &["redis-server", "memcstat"],
    ) {
        return;
    }
    let cluster = Cluster::start();
    let mut cmd = Command::new("memcstat");
    cmd.arg(format!("--servers={}", cluster.addr()));
    let out = run_with_timeout(cmd, Duration::from_secs(10)).expect("memcstat runs");
    assert!(out.status.success(), "memcstat failed: {}", out.stderr);
    for stat in [
        "pid",
        "uptime",
        "curr_connections",
        "cmd_get",
        "get_hits",
        "threads",
    ] {
        assert!(
            out.stdout.contains(stat),
            "memcstat output lacks {stat}:\n{}",
            out.stdout
        );
    }
    // The groups stats scrapers ask for answer in memcached's format.
    let mut c = cluster.client();
    for group in ["items", "slabs", "settings", "sizes", "conns"] {
        let reply = c
            .request_str(format!("stats {group}\r\n").as_bytes())
            .expect("stats group");
        assert!(reply.ends_with("END\r\n"), "stats {group}: {reply}");
    }
}

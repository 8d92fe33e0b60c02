//! Every family, label and value `Metrics` renders.

use super::*;
use memshift_shadow::queue::DropReason;
use std::collections::HashMap;

/// `name{labels}` → value for every sample line.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn value(text: &str, series: &str) -> f64 {
    match samples(text).get(series) {
        Some(v) => *v,
        None => panic!("no series {series} in:\n{text}"),
    }
}

fn types(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

#[test]
fn command_index_round_trips() {
    for (i, c) in COMMANDS.iter().enumerate() {
        assert_eq!(command_index(c), Some(i));
    }
    assert_eq!(command_index("GET"), None);
    assert_eq!(command_index(""), None);
}

#[test]
fn metrics_is_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Metrics>();
    check::<ShardMetrics>();
}

#[test]
fn fresh_registry_has_every_fixed_series_at_zero() {
    let text = Metrics::new().render();
    let t = types(&text);
    for (family, kind, _) in FAMILIES {
        if family.starts_with("memshift_backend_")
            || family == READ_ERRORS_AS_MISSES
            || family == REPLICA_READS
        {
            assert!(!t.contains_key(family), "{family} has no shard yet");
            continue;
        }
        assert_eq!(t.get(family).map(String::as_str), Some(kind), "{family}");
    }
    for c in COMMANDS {
        for p in Protocol::ALL {
            let p = p.as_str();
            assert_eq!(
                value(
                    &text,
                    &format!("{REQUESTS_TOTAL}{{protocol=\"{p}\",command=\"{c}\"}}")
                ),
                0.0
            );
        }
        let count = format!("{REQUEST_DURATION}_count{{command=\"{c}\"}}");
        assert_eq!(value(&text, &count), 0.0);
    }
    for p in PHASES {
        assert_eq!(
            value(&text, &format!("{MIGRATION_PHASE}{{phase=\"{p}\"}}")),
            0.0
        );
    }
    assert_eq!(value(&text, "memshift_client_connections"), 0.0);
    assert_eq!(
        value(
            &text,
            "memshift_shadow_writes_total{backend=\"memcached\",result=\"dropped\"}"
        ),
        0.0
    );
    assert_eq!(
        value(&text, "memshift_compare_total{result=\"value_mismatch\"}"),
        0.0
    );
    assert_eq!(
        value(
            &text,
            "memshift_tls_handshakes_total{result=\"no_client_cert\"}"
        ),
        0.0
    );
    let build = format!(
        "memshift_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(value(&text, &build), 1.0);
}

#[test]
fn no_summaries_anywhere() {
    let text = Metrics::new().render();
    assert!(!text.contains("summary"));
    assert!(!text.contains("quantile="));
}

#[test]
fn request_counts_and_buckets() {
    let m = Metrics::new();
    let get = command_index("get").unwrap();
    let set = command_index("set").unwrap();
    m.request(Protocol::Text, get, 0.00003); // below the first bucket
    m.request(Protocol::Text, get, 0.0003); // in le=0.0005
    m.request(Protocol::Text, get, 2.0); // above the last bucket: only +Inf
    m.request(Protocol::Text, set, 0.001);
    m.request(Protocol::Text, COMMANDS.len(), 1.0); // out of range: ignored, no panic
    m.request(Protocol::Text, usize::MAX, 1.0);
    let text = m.render();
    assert_eq!(
        value(
            &text,
            "memshift_requests_total{protocol=\"text\",command=\"get\"}"
        ),
        3.0
    );
    assert_eq!(
        value(
            &text,
            "memshift_requests_total{protocol=\"text\",command=\"set\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "memshift_requests_total{protocol=\"text\",command=\"quit\"}"
        ),
        0.0
    );
    let b = |le: &str| {
        value(
            &text,
            &format!("memshift_request_duration_seconds_bucket{{command=\"get\",le=\"{le}\"}}"),
        )
    };
    // Buckets are cumulative.
    assert_eq!(b("0.00005"), 1.0);
    assert_eq!(b("0.00025"), 1.0);
    assert_eq!(b("0.0005"), 2.0);
    assert_eq!(b("1"), 2.0);
    assert_eq!(b("+Inf"), 3.0);
    assert_eq!(
        value(
            &text,
            "memshift_request_duration_seconds_count{command=\"get\"}"
        ),
        3.0
    );
    let sum = value(
        &text,
        "memshift_request_duration_seconds_sum{command=\"get\"}",
    );
    assert!((sum - 2.00033).abs() < 1e-9, "{sum}");
    // Every configured bound is rendered, plus +Inf.
    let buckets = text
        .lines()
        .filter(|l| l.starts_with("memshift_request_duration_seconds_bucket{command=\"set\""))
        .count();
    assert_eq!(buckets, DURATION_BUCKETS.len() + 1);
}

#[test]
fn histogram_samples_survive_upkeep_without_render() {
    let m = Metrics::new();
    m.request(Protocol::Text, 0, 0.002);
    m.upkeep();
    m.request(Protocol::Text, 0, 0.002);
    let text = m.render();
    assert_eq!(
        value(
            &text,
            "memshift_request_duration_seconds_count{command=\"get\"}"
        ),
        2.0
    );
}

#[test]
fn backend_labelled_counters() {
    let m = Metrics::new();
    m.get_hit(Backend::Redis);
    m.get_hit(Backend::Redis);
    m.get_miss(Backend::Memcached);
    m.shadow_write(
        Backend::Memcached,
        &ShadowResult::Dropped(DropReason::QueueFull),
    );
    m.shadow_write(Backend::Redis, &ShadowResult::Ok);
    m.set_breaker_open(Backend::Memcached, true);
    m.compare(CompareResult::ValueMismatch);
    m.compare(CompareResult::Match);
    m.compare(CompareResult::Match);
    let text = m.render();
    assert_eq!(
        value(&text, "memshift_get_hits_total{backend=\"redis\"}"),
        2.0
    );
    assert_eq!(
        value(&text, "memshift_get_hits_total{backend=\"memcached\"}"),
        0.0
    );
    assert_eq!(
        value(&text, "memshift_get_misses_total{backend=\"memcached\"}"),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "memshift_shadow_writes_total{backend=\"memcached\",result=\"dropped\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "memshift_shadow_writes_total{backend=\"redis\",result=\"ok\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "memshift_shadow_writes_total{backend=\"redis\",result=\"error\"}"
        ),
        0.0
    );
    assert_eq!(
        value(&text, "memshift_shadow_breaker_open{backend=\"memcached\"}"),
        1.0
    );
    assert_eq!(
        value(&text, "memshift_shadow_breaker_open{backend=\"redis\"}"),
        0.0
    );
    assert_eq!(
        value(&text, "memshift_compare_total{result=\"match\"}"),
        2.0
    );
    assert_eq!(
        value(&text, "memshift_compare_total{result=\"value_mismatch\"}"),
        1.0
    );
    m.set_breaker_open(Backend::Memcached, false);
    let text = m.render();
    assert_eq!(
        value(&text, "memshift_shadow_breaker_open{backend=\"memcached\"}"),
        0.0
    );
}

#[test]
fn shard_series_register_at_zero_and_reregister_idempotently() {
    let m = Metrics::new();
    let s = m.shard(Backend::Redis, "127.0.0.1:6379");
    let text = m.render();
    for k in ErrorKind::ALL {
        let series = format!(
            "memshift_backend_errors_total{{backend=\"redis\",shard=\"127.0.0.1:6379\",kind=\"{}\"}}",
            k.as_str()
        );
        assert_eq!(value(&text, &series), 0.0);
    }
    let up = "memshift_backend_up{backend=\"redis\",shard=\"127.0.0.1:6379\"}";
    assert_eq!(value(&text, up), 0.0);

    s.set_up(true);
    s.error(ErrorKind::Timeout);
    // A reload registers the same shard again: same series, counts kept.
    let again = m.shard(Backend::Redis, "127.0.0.1:6379");
    again.error(ErrorKind::Timeout);
    let text = m.render();
    assert_eq!(value(&text, up), 1.0);
    assert_eq!(
        value(
            &text,
            "memshift_backend_errors_total{backend=\"redis\",shard=\"127.0.0.1:6379\",kind=\"timeout\"}"
        ),
        2.0
    );
    s.set_up(false);
    assert_eq!(value(&m.render(), up), 0.0);
}

#[test]
fn shard_names_with_quotes_are_escaped() {
    let m = Metrics::new();
    m.shard(Backend::Memcached, "we\"ird\\name\n").set_up(true);
    let text = m.render();
    let line = text
        .lines()
        .find(|l| l.starts_with("memshift_backend_up{"))
        .unwrap();
    assert_eq!(
        line,
        "memshift_backend_up{backend=\"memcached\",shard=\"we\\\"ird\\\\name\\n\"} 1"
    );
}

#[test]
fn connections_gauge_goes_up_and_down() {
    let m = Metrics::new();
    m.client_connected(crate::metrics::Transport::Tcp);
    m.client_connected(crate::metrics::Transport::Unix);
    m.client_disconnected(crate::metrics::Transport::Tcp);
    m.connection_rejected();
    m.slow_consumer_closed();
    m.drain_aborted(3);
    m.drain_dropped(5);
    let text = m.render();
    assert_eq!(value(&text, "memshift_client_connections"), 1.0);
    assert_eq!(value(&text, "memshift_client_connections_total"), 2.0);
    let by_transport = |family: &str, t: &str| {
        let prefix = format!("{family}{{transport=\"{t}\"}} ");
        let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap();
        line[prefix.len()..].parse::<f64>().unwrap()
    };
    assert_eq!(by_transport("memshift_transport_connections", "tcp"), 0.0);
    assert_eq!(by_transport("memshift_transport_connections", "unix"), 1.0);
    assert_eq!(
        by_transport("memshift_transport_connections_total", "tcp"),
        1.0
    );
    assert_eq!(
        by_transport("memshift_transport_connections_total", "unix"),
        1.0
    );
    assert_eq!(value(&text, "memshift_rejected_connections_total"), 1.0);
    assert_eq!(value(&text, "memshift_slow_consumers_total"), 1.0);
    assert_eq!(
        value(&text, "memshift_drain_aborted_connections_total"),
        3.0
    );
    assert_eq!(value(&text, "memshift_drain_dropped_total"), 5.0);
}

#[test]
fn phase_is_one_hot() {
    let m = Metrics::new();
    m.set_phase("canary");
    m.set_phase("cutover");
    let text = m.render();
    for p in PHASES {
        let want = if p == "cutover" { 1.0 } else { 0.0 };
        assert_eq!(
            value(&text, &format!("memshift_migration_phase{{phase=\"{p}\"}}")),
            want
        );
    }
    m.set_phase("bogus");
    let text = m.render();
    for p in PHASES {
        assert_eq!(
            value(&text, &format!("memshift_migration_phase{{phase=\"{p}\"}}")),
            0.0
        );
    }
}

#[test]
fn rollbacks_tls_and_reloads() {
    let m = Metrics::new();
    m.rollback();
    m.tls_handshake(TlsResult::Ok);
    m.tls_handshake(TlsResult::Ok);
    m.tls_handshake(TlsResult::Timeout);
    m.config_reload(true);
    m.config_reload(false);
    m.config_reload(false);
    let text = m.render();
    assert_eq!(value(&text, "memshift_rollbacks_total"), 1.0);
    assert_eq!(
        value(&text, "memshift_tls_handshakes_total{result=\"ok\"}"),
        2.0
    );
    assert_eq!(
        value(&text, "memshift_tls_handshakes_total{result=\"timeout\"}"),
        1.0
    );
    assert_eq!(
        value(&text, "memshift_tls_handshakes_total{result=\"error\"}"),
        0.0
    );
    assert_eq!(
        value(&text, "memshift_config_reloads_total{result=\"ok\"}"),
        1.0
    );
    assert_eq!(
        value(&text, "memshift_config_reloads_total{result=\"error\"}"),
        2.0
    );
}

#[test]
fn registries_are_isolated() {
    let a = Metrics::new();
    let b = Metrics::new();
    a.rollback();
    assert_eq!(value(&a.render(), "memshift_rollbacks_total"), 1.0);
    assert_eq!(value(&b.render(), "memshift_rollbacks_total"), 0.0);
}

#[test]
fn every_family_has_help() {
    let text = Metrics::new().render();
    for (family, _, _) in FAMILIES {
        if family.starts_with("memshift_backend_")
            || family == READ_ERRORS_AS_MISSES
            || family == REPLICA_READS
        {
            continue;
        }
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family} has no HELP line"
        );
    }
}

#[test]
fn near_cache_families_render_from_their_tallies() {
    let m = Metrics::new();
    let text = m.render();
    let t = types(&text);
    for (family, kind, _) in near_cache::NEAR_CACHE_FAMILIES {
        assert_eq!(t.get(family).map(String::as_str), Some(kind), "{family}");
        assert!(text.contains(&format!("# HELP {family} ")), "{family}");
    }
    let nc = &m.near_cache;
    nc.hit();
    nc.hit();
    nc.miss();
    nc.admission();
    nc.invalidation(false);
    nc.invalidation(true);
    nc.resized((0, 0), (300, 2));
    nc.resized((300, 2), (100, 1));
    let text = m.render();
    assert_eq!(value(&text, near_cache::NEAR_CACHE_HITS), 2.0);
    assert_eq!(value(&text, near_cache::NEAR_CACHE_MISSES), 1.0);
    assert_eq!(value(&text, near_cache::NEAR_CACHE_ADMISSIONS), 1.0);
    assert_eq!(value(&text, near_cache::NEAR_CACHE_EVICTIONS), 0.0);
    let inv = near_cache::NEAR_CACHE_INVALIDATIONS;
    assert_eq!(value(&text, &format!("{inv}{{kind=\"key\"}}")), 1.0);
    assert_eq!(value(&text, &format!("{inv}{{kind=\"all\"}}")), 1.0);
    assert_eq!(value(&text, near_cache::NEAR_CACHE_BYTES), 100.0);
    assert_eq!(value(&text, near_cache::NEAR_CACHE_ENTRIES), 1.0);
    let mut stats = bytes::BytesMut::new();
    nc.render_stats(&mut stats);
    let stats = String::from_utf8_lossy(&stats);
    assert!(stats.starts_with("STAT near_cache_hits 2\r\nSTAT near_cache_misses 1\r\n"));
    assert!(stats.contains("STAT near_cache_bytes 100\r\nSTAT near_cache_entries 1\r\n"));
}

#[test]
fn families_rendered_outside_the_recorder_appear_once_with_their_help() {
    let m = Metrics::new();
    m.request(Protocol::Resp, command_index("get").unwrap(), 0.001);
    m.get_hit(Backend::Memcached);
    m.get_miss(Backend::Redis);
    let text = m.render();
    for (family, _, help) in FAMILIES {
        let type_lines = text
            .lines()
            .filter(|l| l.starts_with(&format!("# TYPE {family} ")))
            .count();
        let expected = usize::from(
            !(family.starts_with("memshift_backend_")
                || family == READ_ERRORS_AS_MISSES
                || family == REPLICA_READS),
        );
        assert_eq!(type_lines, expected, "{family}");
        if expected == 1 {
            assert!(
                text.contains(&format!("# HELP {family} {help}\n")),
                "{family}"
            );
        }
    }
    let get = |series: &str| value(&text, series);
    assert_eq!(
        get("memshift_requests_total{protocol=\"resp\",command=\"get\"}"),
        1.0
    );
    assert_eq!(
        get("memshift_requests_total{protocol=\"text\",command=\"get\"}"),
        0.0
    );
    assert_eq!(get("memshift_get_hits_total{backend=\"memcached\"}"), 1.0);
    assert_eq!(get("memshift_get_hits_total{backend=\"redis\"}"), 0.0);
    assert_eq!(get("memshift_get_misses_total{backend=\"redis\"}"), 1.0);
}

#[test]
fn request_metrics_off_count_nothing_but_still_render() {
    let m = Metrics::without_request_metrics();
    m.request(Protocol::Text, 0, 0.001);
    m.get_hit(Backend::Redis);
    let text = m.render();
    assert_eq!(
        value(
            &text,
            "memshift_requests_total{protocol=\"text\",command=\"get\"}"
        ),
        0.0
    );
    assert_eq!(
        value(&text, "memshift_get_hits_total{backend=\"redis\"}"),
        0.0
    );
}

#[test]
fn request_counts_sum_over_threads() {
    let m = std::sync::Arc::new(Metrics::new());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    m.request(Protocol::Text, 0, 0.0001);
                    m.get_hit(Backend::Redis);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let text = m.render();
    assert_eq!(
        value(
            &text,
            "memshift_requests_total{protocol=\"text\",command=\"get\"}"
        ),
        4000.0
    );
    assert_eq!(
        value(&text, "memshift_get_hits_total{backend=\"redis\"}"),
        4000.0
    );
}

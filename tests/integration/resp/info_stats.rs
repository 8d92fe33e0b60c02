//! `INFO commandstats`, `errorstats`, `latencystats` and `total_error_replies` through
//! memshift's RESP port (3 ring shards) against one plain Redis given the
//! same commands: calls, rejected and failed calls per command and
//! subcommand, and error replies by code, through arity errors, unknown
//! commands and subcommands, wrong types, and transactions that run, fail
//! inside, abort (`EXECABORT`) and are watched, and the subscribed
//! context; then what memshift refuses, counted by name as rejected,
//! and Stats' subscription counts.

use std::collections::BTreeMap;
use std::time::Duration;

use memshift_tests::{require_tools, RedisClient, RedisServer, Resp, RespCluster};

/// The commands, each sent alone and answered before the next.
const SCRIPT: &[&[&str]] = &[
    &["SET", "{t}a", "1"],
    &["GET", "{t}a"],
    &["GET"],
    &["INCR", "{t}a"],
    &["SET", "{t}s", "x"],
    &["INCR", "{t}s"],
    &["NOPE", "x"],
    &["CLIENT", "SETNAME", "n"],
    &["CLIENT", "FOO"],
    &["CLIENT"],
    &["CONFIG", "GET", "maxmemory"],
    &["LPUSH", "{t}l", "x"],
    &["GET", "{t}l"],
    &["AUTH", "nopass"],
    // A command refused while queued: EXEC aborts, nothing runs.
    &["MULTI"],
    &["SET"],
    &["SET", "{t}a", "2"],
    &["EXEC"],
    // Runs, one command failing inside.
    &["MULTI"],
    &["SET", "{t}a", "3"],
    &["INCR", "{t}s"],
    &["EXEC"],
    &["MULTI"],
    &["DISCARD"],
    &["WATCH", "{t}a"],
    &["MULTI"],
    &["GET", "{t}a"],
    &["EXEC"],
    &["PING"],
    &["ECHO", "hi"],
    &["DEL", "{t}a", "{t}l"],
    &["MGET", "{t}a", "{t}s"],
    &["EXISTS", "{t}a"],
    // Subscribed (RESP2): a GET is refused before it runs.
    &["SUBSCRIBE", "ch"],
    &["GET", "{t}a"],
    &["PING"],
    &["UNSUBSCRIBE", "ch"],
];

/// Commands either side also ran for itself (the harness' readiness
/// check, the reset, INFO).
const IGNORED: [&str; 3] = ["info", "config|resetstat", "command|docs"];

fn info(c: &mut RedisClient, section: &str) -> String {
    match c.cmd(&[b"INFO", section.as_bytes()]).expect("INFO") {
        Resp::Bulk(Some(b)) => String::from_utf8(b).expect("utf-8"),
        other => panic!("INFO {section}: {other:?}"),
    }
}

/// `(name, fields)` of a section's `<prefix><name>:<fields>` lines, the
/// [`IGNORED`] commands left out.
fn named_lines(c: &mut RedisClient, section: &str, prefix: &str) -> Vec<(String, String)> {
    info(c, section)
        .lines()
        .filter_map(|l| l.strip_prefix(prefix)?.split_once(':'))
        .filter(|(name, _)| !IGNORED.contains(name))
        .map(|(name, fields)| (name.to_owned(), fields.to_owned()))
        .collect()
}

/// `cmdstat_<name>` → its counts without the times.
fn command_stats(c: &mut RedisClient) -> BTreeMap<String, String> {
    named_lines(c, "commandstats", "cmdstat_")
        .into_iter()
        .map(|(name, fields)| {
            let counts: Vec<&str> = fields
                .split(',')
                .filter(|f| !f.starts_with("usec"))
                .collect();
            (name, counts.join(","))
        })
        .collect()
}

/// The fields of `cmdstat_<name>`, times included.
fn command_line(c: &mut RedisClient, name: &str) -> String {
    let prefix = format!("cmdstat_{name}:");
    info(c, "commandstats")
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {prefix}"))
        .to_owned()
}

/// `latency_percentiles_usec_<name>` → its p50, p99, p99.9.
fn latency_stats(c: &mut RedisClient) -> BTreeMap<String, Vec<f64>> {
    named_lines(c, "latencystats", "latency_percentiles_usec_")
        .into_iter()
        .map(|(name, fields)| {
            let labels: Vec<&str> = fields
                .split(',')
                .filter_map(|f| Some(f.split_once('=')?.0))
                .collect();
            assert_eq!(labels, ["p50", "p99", "p99.9"], "{name}: {fields}");
            let values = fields
                .split(',')
                .filter_map(|f| f.split_once('=')?.1.parse().ok())
                .collect();
            (name, values)
        })
        .collect()
}

/// `errorstat_<CODE>:count=<n>` lines, sorted.
fn error_stats(c: &mut RedisClient) -> Vec<String> {
    let mut lines: Vec<String> = info(c, "errorstats")
        .lines()
        .filter(|l| l.starts_with("errorstat_"))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// A Stats field's value.
fn stat(c: &mut RedisClient, field: &str) -> String {
    info(c, "stats")
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or("missing")
        .to_owned()
}

#[test]
fn command_and_error_stats_match_plain_redis() {
    if !require_tools("command_and_error_stats", &["redis-server"]) {
        return;
    }
    // Transactions run on one shard: their keys share a hash tag.
    let cluster = RespCluster::start_with_tables(3, "", "[ring]\nhash_tag = \"{}\"\n");
    let plain = RedisServer::start();
    let mut m = RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(30)).expect("m");
    let mut p = plain.client();
    for c in [&mut m, &mut p] {
        // Both start from zero (the plain Redis answered the harness).
        assert_eq!(
            c.cmd(&[b"CONFIG", b"RESETSTAT"]).expect("reset"),
            Resp::Simple("OK".into())
        );
    }
    for cmd in SCRIPT {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        let (mine, theirs) = (m.cmd(&args), p.cmd(&args));
        let kind = |r: &std::io::Result<Resp>| match r {
            Ok(Resp::Error(e)) => e.split(' ').next().unwrap_or("").to_owned(),
            Ok(_) => "reply".to_owned(),
            Err(e) => format!("{e}"),
        };
        assert_eq!(
            kind(&mine),
            kind(&theirs),
            "{cmd:?}: {mine:?} vs {theirs:?}"
        );
    }
    let (mine, theirs) = (command_stats(&mut m), command_stats(&mut p));
    assert!(
        mine.contains_key("exec") && mine.contains_key("client|setname"),
        "{mine:?}"
    );
    assert_eq!(mine, theirs, "INFO commandstats");
    let errors = error_stats(&mut m);
    assert!(
        errors.contains(&"errorstat_EXECABORT:count=1".to_owned()),
        "{errors:?}"
    );
    assert_eq!(errors, error_stats(&mut p), "INFO errorstats");
    assert_eq!(
        stat(&mut m, "total_error_replies"),
        stat(&mut p, "total_error_replies")
    );
    // What memshift refuses (Redis runs them) shows by name, rejected.
    for cmd in [
        &["RENAME", "{t}s", "{t}b"][..],
        &["CONFIG", "SET", "maxmemory", "0"],
    ] {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        let reply = m.cmd(&args).expect("reply");
        assert!(
            matches!(&reply, Resp::Error(e) if e.contains("not supported")),
            "{cmd:?}: {reply:?}"
        );
    }
    let refused = command_stats(&mut m);
    for name in ["rename", "config|set"] {
        assert_eq!(
            refused.get(name).map(String::as_str),
            Some("calls=0,rejected_calls=1,failed_calls=0"),
            "{name}: {refused:?}"
        );
    }
    // Subscriptions (another connection's) show in Stats as on Redis.
    let mut sub_m = RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(30)).expect("s");
    let mut sub_p = plain.client();
    for sub in [&mut sub_m, &mut sub_p] {
        for cmd in [
            &[&b"SUBSCRIBE"[..], b"c1"][..],
            &[b"SUBSCRIBE", b"c2"],
            &[b"PSUBSCRIBE", b"p*"],
        ] {
            assert!(matches!(sub.cmd(cmd).expect("subscribe"), Resp::Array(_)));
        }
    }
    for field in ["pubsub_channels", "pubsub_patterns"] {
        let (mine, theirs) = (stat(&mut m, field), stat(&mut p, field));
        assert_eq!(mine, theirs, "{field}");
        assert_ne!(mine, "0", "{field}");
    }
    // Latencystats: the commands that ran, each p50 <= p99 <= p99.9.
    let (mine, theirs) = (latency_stats(&mut m), latency_stats(&mut p));
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "INFO latencystats"
    );
    for (name, values) in &mine {
        assert!(
            values.len() == 3
                && values[0] > 0.0
                && values[0] <= values[1]
                && values[1] <= values[2],
            "{name}: {values:?}"
        );
    }
    // The usec fields are there and add up.
    let get = command_line(&mut m, "get");
    assert!(
        get.contains(",usec=") && get.contains(",usec_per_call="),
        "{get}"
    );

    // CONFIG RESETSTAT: everything back to zero, on both.
    for c in [&mut m, &mut p] {
        assert_eq!(
            c.cmd(&[b"CONFIG", b"RESETSTAT"]).expect("reset"),
            Resp::Simple("OK".into())
        );
    }
    let after = command_stats(&mut m);
    assert!(after.is_empty(), "{after:?}");
    assert_eq!(after, command_stats(&mut p));
    assert_eq!(error_stats(&mut m), Vec::<String>::new());
    assert_eq!(error_stats(&mut p), Vec::<String>::new());
    assert!(latency_stats(&mut m).is_empty());
    for field in ["total_error_replies", "keyspace_hits"] {
        assert_eq!(stat(&mut m, field), "0", "{field}");
        assert_eq!(stat(&mut m, field), stat(&mut p, field), "{field}");
    }
}

/// A shard that cannot reset its stats makes `CONFIG RESETSTAT` an error,
/// and memshift's own counters stay as they were.
#[test]
fn resetstat_with_a_shard_down_is_an_error_and_keeps_the_counts() {
    if !require_tools("resetstat_with_a_shard_down", &["redis-server"]) {
        return;
    }
    let mut cluster = RespCluster::start_with(3, "");
    let mut m = RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(30)).expect("m");
    assert!(matches!(m.cmd(&[b"GET"]).expect("GET"), Resp::Error(_)));
    assert_eq!(
        m.cmd(&[b"PING"]).expect("PING"),
        Resp::Simple("PONG".into())
    );
    let before = command_stats(&mut m);
    assert_eq!(
        before.get("get").map(String::as_str),
        Some("calls=0,rejected_calls=1,failed_calls=0")
    );
    cluster.shards[1].stop();
    match m.cmd(&[b"CONFIG", b"RESETSTAT"]).expect("reset") {
        Resp::Error(e) => assert!(e.starts_with("ERR memshift: backend"), "{e}"),
        other => panic!("RESETSTAT with a shard down: {other:?}"),
    }
    let after = command_stats(&mut m);
    for name in ["get", "ping"] {
        assert_eq!(after.get(name), before.get(name), "{name}: {after:?}");
    }
    let reset = command_line(&mut m, "config|resetstat");
    assert!(
        reset.starts_with("calls=1,") && reset.ends_with(",rejected_calls=0,failed_calls=1"),
        "{reset}"
    );
    assert_eq!(stat(&mut m, "total_error_replies"), "2");
}

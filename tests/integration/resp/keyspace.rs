//! Keyspace walks, INFO and CONFIG GET through memshift's RESP port
//! (docs/resp.md): redis-py's `scan_iter`, KEYS, RANDOMKEY and INFO print
//! the same lines through memshift (3 ring shards, and a 6-node Redis
//! Cluster) as on one plain Redis holding the same 10,001 keys, half of
//! memshift's written through memcached's protocol; `redis-cli --scan`
//! sees every key once; INFO sums the shards and says when one did not
//! answer; `redis-benchmark` prints no warning; CONFIG GET answers the
//! read-only subset as the shards have it.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::{Duration, Instant};

use memshift_tests::ops_support::set_many;
use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::{
    redis_py_python, require_tools, run_with_timeout, McClient, RedisClient, RedisServer, Resp,
    RespCluster,
};

use super::clients::redis_py;

const KEYSPACE_PY: &str = include_str!("keyspace.py");
/// Keys written through each protocol.
const HALF: usize = 5_000;
/// Keys matching `k:*`: both halves and one hash.
const MATCHING: usize = 2 * HALF + 1;

/// The walk's keys: `k:mc:<i>` through memcached's protocol (`mc`; with
/// SET where there is none), `k:resp:<i>` with SET (every 7th with a
/// TTL), the hash `k:hash`, and `other`.
fn fill(resp: &mut RedisClient, mc: Option<&mut McClient>) {
    let mc_keys: Vec<(String, Vec<u8>)> = (0..HALF)
        .map(|i| (format!("k:mc:{i}"), format!("m{i}").into_bytes()))
        .collect();
    match mc {
        Some(mc) => set_many(mc, &mc_keys).expect("memcached sets"),
        None => {
            for batch in mc_keys.chunks(500) {
                let cmds: Vec<Vec<&[u8]>> = batch
                    .iter()
                    .map(|(k, v)| vec![&b"SET"[..], k.as_bytes(), v])
                    .collect();
                pipeline(resp, &cmds);
            }
        }
    }
    let resp_keys: Vec<String> = (0..HALF).map(|i| format!("k:resp:{i}")).collect();
    for (n, batch) in resp_keys.chunks(500).enumerate() {
        let cmds: Vec<Vec<&[u8]>> = batch
            .iter()
            .enumerate()
            .map(|(i, k)| match (n * 500 + i) % 7 {
                0 => vec![&b"SET"[..], k.as_bytes(), b"v", b"EX", b"1000"],
                _ => vec![&b"SET"[..], k.as_bytes(), b"v"],
            })
            .collect();
        pipeline(resp, &cmds);
    }
    pipeline(
        resp,
        &[
            vec![&b"HSET"[..], b"k:hash", b"f", b"v"],
            vec![&b"SET"[..], b"other", b"v"],
        ],
    );
}

fn pipeline(c: &mut RedisClient, cmds: &[Vec<&[u8]>]) {
    let refs: Vec<&[&[u8]]> = cmds.iter().map(Vec::as_slice).collect();
    for reply in c.pipeline(&refs).expect("pipeline") {
        assert!(!matches!(reply, Resp::Error(_)), "{reply:?}");
    }
}

/// `redis-cli --scan --pattern 'k:*'`: the keys, sorted,
/// after checking none came twice.
fn cli_scan(port: u16) -> Vec<String> {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-p", &port.to_string(), "--scan", "--pattern", "k:*"]);
    let out = run_with_timeout(cmd, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "redis-cli --scan: {}", out.stderr);
    let mut keys: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "redis-cli --scan returned a key twice");
    keys
}

/// The walk's keys through memshift (`resp_port`, and `mc` on its
/// memcached port) and on a plain Redis, then the walks on both: the
/// same lines.
fn fill_and_walk(resp_port: u16, mut mc: McClient) {
    let plain = RedisServer::start();
    let addr = format!("127.0.0.1:{resp_port}");
    let mut m = RedisClient::connect(&addr, Duration::from_secs(30)).expect("connect");
    fill(&mut m, Some(&mut mc));
    fill(&mut plain.client(), None);
    let python = redis_py_python();
    let tmp = tempfile::tempdir().expect("temp dir");
    let script = tmp.path().join("keyspace.py");
    std::fs::write(&script, KEYSPACE_PY).expect("write keyspace.py");
    let every = format!("returned {MATCHING} unique {MATCHING} ");
    for proto in [2, 3] {
        let want = redis_py(&python, &script, plain.port(), proto);
        let got = redis_py(&python, &script, resp_port, proto);
        assert_eq!(
            got, want,
            "RESP{proto}: memshift's walks differ from plain Redis"
        );
        assert!(
            want.lines().next().is_some_and(|l| l.contains(&every)),
            "{want}"
        );
    }
    let want = cli_scan(plain.port());
    assert_eq!(want.len(), MATCHING);
    assert!(cli_scan(resp_port) == want, "redis-cli --scan differs");
}

#[test]
fn scan_keys_randomkey_match_plain_redis() {
    let name = "scan_keys_randomkey_match_plain_redis";
    if !require_tools(name, &["python3", "redis-server", "redis-cli"]) {
        return;
    }
    let cluster = RespCluster::start();
    fill_and_walk(cluster.resp_port, cluster.memshift.client());
    let sizes: Vec<i64> = cluster.shards.iter().map(RedisServer::dbsize).collect();
    assert!(
        sizes.iter().all(|&n| n > 1000),
        "keys not spread: {sizes:?}"
    );

    // A leftover copy on a shard the ring does not place the key on (as a
    // resize leaves them) is not walked: GET would not read it.
    let holder = cluster
        .shards
        .iter()
        .position(|s| s.cmd(&[b"EXISTS", b"k:resp:0"]) == Resp::Int(1))
        .expect("a shard holds k:resp:0");
    let other = &cluster.shards[(holder + 1) % cluster.shards.len()];
    assert_eq!(
        other.cmd(&[b"SET", b"k:resp:0", b"stale"]),
        Resp::Simple("OK".into())
    );
    assert_eq!(cli_scan(cluster.resp_port).len(), MATCHING);
    let mut m = RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(30)).expect("m");
    let keys = m.cmd(&[b"KEYS", b"k:resp:0"]).expect("KEYS");
    assert_eq!(
        keys,
        Resp::Array(Some(vec![Resp::Bulk(Some(b"k:resp:0".to_vec()))]))
    );
}

#[test]
fn scan_over_redis_cluster_matches_plain_redis() {
    let name = "scan_over_redis_cluster_matches_plain_redis";
    if !require_tools(name, &["python3", "redis-server", "redis-cli"]) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    let (memshift, resp_port, _) = super::cluster::start(&nodes, "");
    fill_and_walk(resp_port, memshift.client());
    let with_keys = nodes
        .masters()
        .into_iter()
        .filter(|&i| nodes.cmd(i, &[b"DBSIZE"]).as_int().unwrap_or(0) > 1000)
        .count();
    assert_eq!(with_keys, 3, "keys on every master");
}

/// INFO's section titles (`# Name`), memshift's own section left out.
fn titles(c: &mut RedisClient, args: &[&str]) -> Vec<String> {
    let text = info(c, args);
    text.lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|t| *t != "Memshift")
        .map(str::to_owned)
        .collect()
}

fn info(c: &mut RedisClient, args: &[&str]) -> String {
    let mut cmd: Vec<&[u8]> = vec![b"INFO"];
    cmd.extend(args.iter().map(|a| a.as_bytes()));
    match c.cmd(&cmd).expect("INFO") {
        Resp::Bulk(Some(b)) => String::from_utf8(b).expect("utf-8"),
        other => panic!("INFO {args:?}: {other:?}"),
    }
}

/// `field:value` lines of an INFO text.
fn fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn shard_field(s: &RedisServer, section: &str, field: &str) -> i64 {
    fields(&info(&mut s.client(), &[section]))[field]
        .parse()
        .expect("an integer")
}

#[test]
fn info_answers_the_sections_asked_and_sums_the_shards() {
    let name = "info_answers_the_sections_asked_and_sums_the_shards";
    if !require_tools(name, &["redis-server"]) {
        return;
    }
    let cluster = RespCluster::start();
    let plain = RedisServer::start();
    let mut m = RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(30)).expect("m");
    let mut p = plain.client();
    for args in [
        &[][..],
        &["default"],
        &["all"],
        &["everything"],
        &["keyspace", "MEMORY"],
        &["server", "server"],
        &["nosuch"],
        &["commandstats"],
    ] {
        assert_eq!(titles(&mut m, args), titles(&mut p, args), "INFO {args:?}");
    }
    assert_eq!(info(&mut m, &["nosuch"]), "");

    for i in 0..300 {
        let k = format!("ik:{i}");
        let mut cmd: Vec<&[u8]> = vec![b"SET", k.as_bytes(), b"v"];
        if i % 3 == 0 {
            cmd.extend([&b"EX"[..], b"1000"]);
        }
        m.cmd(&cmd).expect("SET");
    }
    let keyspace = info(&mut m, &["keyspace"]);
    assert!(
        keyspace.starts_with("# Keyspace\r\ndb0:keys=300,expires=100,avg_ttl="),
        "{keyspace:?}"
    );
    assert_eq!(keyspace.matches('#').count(), 1, "{keyspace:?}");

    // Limits add up; a shard without one makes the fleet's none.
    for (s, mb) in cluster.shards.iter().zip([100, 200, 300]) {
        let limit = format!("{mb}mb");
        for (k, v) in [
            ("maxmemory", limit.as_str()),
            ("maxmemory-policy", "allkeys-lru"),
        ] {
            assert_eq!(
                s.cmd(&[b"CONFIG", b"SET", k.as_bytes(), v.as_bytes()]),
                Resp::Simple("OK".into())
            );
        }
    }
    let memory = fields(&info(&mut m, &["memory"]));
    assert_eq!(memory["maxmemory"], (600u64 << 20).to_string());
    assert_eq!(memory["maxmemory_human"], "600.00M");
    assert_eq!(memory["maxmemory_policy"], "allkeys-lru");
    assert!(!memory.contains_key("redis_version") && !memory.contains_key("db0"));
    let used: i64 = memory["used_memory"].parse().expect("used_memory");
    let biggest = cluster
        .shards
        .iter()
        .map(|s| shard_field(s, "memory", "used_memory"))
        .max()
        .expect("shards");
    assert!(used > biggest, "used_memory {used} is not the shards' sum");
    let config = m
        .cmd(&[b"CONFIG", b"GET", b"maxmemory"])
        .expect("CONFIG GET");
    let want = Resp::Array(Some(vec![
        Resp::Bulk(Some(b"maxmemory".to_vec())),
        Resp::Bulk(Some((600u64 << 20).to_string().into_bytes())),
    ]));
    assert_eq!(config, want);
    cluster.shards[0].cmd(&[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    cluster.shards[2].cmd(&[b"CONFIG", b"SET", b"maxmemory-policy", b"noeviction"]);
    let memory = fields(&info(&mut m, &["memory"]));
    assert_eq!(memory["maxmemory"], "0");
    assert!(!memory.contains_key("maxmemory_policy"), "{memory:?}");

    // Hits are the shards' (nothing else reads them meanwhile).
    for i in 0..10 {
        m.cmd(&[b"GET", format!("ik:{i}").as_bytes()]).expect("GET");
    }
    let stats = fields(&info(&mut m, &["stats"]));
    let hits: i64 = cluster
        .shards
        .iter()
        .map(|s| shard_field(s, "stats", "keyspace_hits"))
        .sum();
    assert!(hits >= 10);
    assert_eq!(stats["keyspace_hits"], hits.to_string());
    let server = fields(&info(&mut m, &["server"]));
    assert_eq!(server["tcp_port"], cluster.resp_port.to_string());
    assert_eq!(server["redis_version"], "7.0.0");

    // A shard that does not answer: said so, within the request timeout.
    let on_first = cluster.shards[0].dbsize();
    cluster.shards[0].signal(libc::SIGSTOP);
    let started = Instant::now();
    let server = info(&mut m, &["server"]);
    assert!(server.contains("tcp_port:") && started.elapsed() < Duration::from_secs(3));
    let keyspace = info(&mut m, &["keyspace"]);
    let waited = started.elapsed();
    cluster.shards[0].signal(libc::SIGCONT);
    assert!(waited < Duration::from_secs(5), "INFO waited {waited:?}");
    let want = format!("db0:keys={},", 300 - on_first);
    assert!(
        keyspace.contains(&want) && keyspace.ends_with("memshift_shards_missing:1\r\n"),
        "{keyspace:?}"
    );
}

#[test]
fn redis_benchmark_and_config_get_find_what_they_ask() {
    let name = "redis_benchmark_and_config_get_find_what_they_ask";
    if !require_tools(name, &["redis-server", "redis-benchmark"]) {
        return;
    }
    let cluster = RespCluster::start();
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p", &cluster.resp_port.to_string()])
        .args(["-t", "get,set", "-P", "16", "-n", "10000", "-q"]);
    let out = run_with_timeout(cmd, Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    let printed = format!("{}{}", out.stdout, out.stderr);
    assert!(out.status.success(), "redis-benchmark failed:\n{printed}");
    assert!(
        printed.contains("SET: ") && printed.contains("GET: "),
        "{printed}"
    );
    for warning in ["WARNING", "Could not fetch", "ERROR", "rror"] {
        assert!(!printed.contains(warning), "{warning}:\n{printed}");
    }

    // The subset, as one plain Redis started alike has it.
    let plain = RedisServer::start();
    let mut m = RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(30)).expect("m");
    let pairs = |c: &mut RedisClient, pattern: &str| -> BTreeSet<(Vec<u8>, Vec<u8>)> {
        let reply = c
            .cmd(&[b"CONFIG", b"GET", pattern.as_bytes()])
            .expect("CONFIG");
        let list = reply.as_bulk_list().unwrap_or_else(|| panic!("{reply:?}"));
        list.chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect()
    };
    let readable = [
        "save",
        "appendonly",
        "appendfsync",
        "maxmemory",
        "maxmemory-policy",
    ];
    for pattern in readable
        .iter()
        .chain(&["MAXMEMORY", "maxmemory*", "append*"])
    {
        let want: BTreeSet<_> = pairs(&mut plain.client(), pattern)
            .into_iter()
            .filter(|(k, _)| {
                readable
                    .iter()
                    .any(|r| k.eq_ignore_ascii_case(r.as_bytes()))
            })
            .collect();
        assert!(!want.is_empty(), "{pattern}");
        assert_eq!(pairs(&mut m, pattern), want, "CONFIG GET {pattern}");
    }
    let one_db = BTreeSet::from([(b"databases".to_vec(), b"1".to_vec())]);
    assert_eq!(pairs(&mut m, "databases"), one_db);
    let all: BTreeSet<Vec<u8>> = pairs(&mut m, "*").into_iter().map(|(k, _)| k).collect();
    assert_eq!(all.len(), readable.len() + 1, "{all:?}");
    // A client library given a database number shows why at connect.
    match m.cmd(&[b"SELECT", b"1"]).expect("SELECT") {
        Resp::Error(e) => assert!(e.contains("serves database 0 only"), "{e}"),
        other => panic!("SELECT 1: {other:?}"),
    }
    for refused in [&["CONFIG", "SET", "save", ""][..], &["CONFIG", "REWRITE"]] {
        let args: Vec<&[u8]> = refused.iter().map(|a| a.as_bytes()).collect();
        match m.cmd(&args).expect("CONFIG") {
            Resp::Error(e) => assert!(
                e.starts_with(&format!(
                    "ERR CONFIG {} is not supported by memshift: ",
                    refused[1]
                )),
                "{e}"
            ),
            other => panic!("{refused:?}: {other:?}"),
        }
    }
}

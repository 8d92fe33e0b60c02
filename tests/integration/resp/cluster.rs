//! The RESP listener over a real 6-node Redis Cluster (`mode = "cluster"`,
//! 3 masters), compared with one plain standalone Redis: the redis-cli
//! workload in RESP2 and RESP3; single-key commands of every type on keys
//! of every master; MGET/MSET/DEL/UNLINK/EXISTS/TOUCH split by slot and
//! merged in the client's order; EVAL with one key; a memcached write read
//! through RESP and the reverse; refused commands. Optionally with the
//! near cache on (its tracking connections are per master).

use std::collections::HashSet;
use std::time::Duration;

use memshift_tests::env::free_port;
use memshift_tests::ops_support::{metric, wait_until};
use memshift_tests::process::start_memshift_on_free_ports;
use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::resp_proxy::wait_for_resp_listener;
use memshift_tests::{require_tools, Memshift, RedisClient, RedisServer, Resp};

use super::clients::redis_cli;

const TOOLS: &[&str] = &["redis-server", "redis-cli"];

/// memshift in cluster mode over `nodes` with its RESP listener on;
/// returns it, its RESP port and its admin port.
pub(super) fn start(nodes: &RedisClusterNodes, extra_tables: &str) -> (Memshift, u16, u16) {
    let seeds = nodes.addrs()[..2]
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut resp_port = 0;
    let (memshift, admin_port, _) = start_memshift_on_free_ports(|port, admin| {
        resp_port = free_port();
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nresp_listen = \"127.0.0.1:{resp_port}\"\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [redis]\nmode = \"cluster\"\ncluster_nodes = [{seeds}]\ntimeout_ms = 2000\n\
             cluster_refresh_ms = 500\n\n[migration]\nphase = \"redis\"\n\n{extra_tables}"
        )
    });
    wait_for_resp_listener(&memshift, resp_port);
    (memshift, resp_port, admin_port)
}

fn connect(port: u16) -> RedisClient {
    RedisClient::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(30)).expect("connect")
}

/// Run `script` on both; every reply must be the same.
fn same_replies(memshift: &mut RedisClient, plain: &mut RedisClient, script: &[Vec<String>]) {
    for args in script {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        let want = plain.cmd(&a).expect("plain Redis");
        let got = memshift.cmd(&a).expect("memshift");
        assert_eq!(got, want, "{args:?}: memshift answered differently");
    }
}

fn line(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

/// 30 keys that span every master (asserted), in a shuffled order.
fn spread_keys(nodes: &RedisClusterNodes) -> Vec<String> {
    let keys: Vec<String> = (0..30).map(|i| format!("ck:{}", (i * 7) % 30)).collect();
    let masters: HashSet<usize> = keys
        .iter()
        .map(|k| nodes.master_of(nodes.keyslot(k)))
        .collect();
    assert_eq!(masters.len(), 3, "the keys should span every master");
    keys
}

fn resp_over_cluster(name: &str, extra_tables: &str) {
    if !require_tools(name, TOOLS) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    let (memshift, resp_port, admin_port) = start(&nodes, extra_tables);
    let plain = RedisServer::start();

    // The redis-cli workload (FLUSHALL first: both start empty).
    for proto in [2, 3] {
        let want = redis_cli(plain.port(), proto);
        let got = redis_cli(resp_port, proto);
        assert_eq!(
            got,
            want,
            "RESP{proto}: memshift over a cluster differs from plain Redis\nmemshift stderr:\n{}",
            memshift.stderr()
        );
    }

    let mut m = connect(resp_port);
    let mut p = connect(plain.port());
    let keys = spread_keys(&nodes);
    let mut script: Vec<Vec<String>> = vec![line("FLUSHALL")];
    // Multi-key commands across every master, merged in request order.
    let mut mset = line("MSET");
    for k in &keys {
        mset.push(k.clone());
        mset.push(format!("v-{k}"));
    }
    script.push(mset);
    let mut mget = line("MGET");
    mget.extend(keys.iter().cloned());
    mget.insert(5, "ck:absent".into());
    mget.push(keys[0].clone());
    script.push(mget.clone());
    let mut exists = line("EXISTS ck:absent");
    exists.extend(keys.iter().cloned());
    exists.push(keys[3].clone());
    script.push(exists.clone());
    let mut touch = line("TOUCH");
    touch.extend(keys.iter().take(10).cloned());
    script.push(touch);
    let mut del = line("DEL ck:absent");
    del.extend(keys.iter().step_by(3).cloned());
    script.push(del);
    let mut unlink = line("UNLINK");
    unlink.extend(keys.iter().skip(1).step_by(3).cloned());
    script.push(unlink);
    script.push(mget);
    script.push(exists);
    script.push(line("DBSIZE"));
    // Single-key commands of every type, on keys of every master.
    for (i, k) in keys.iter().enumerate().skip(2).step_by(3).take(6) {
        for cmd in [
            format!("SET {k} {i}"),
            format!("INCRBY {k} 10"),
            format!("APPEND {k} x"),
            format!("STRLEN {k}"),
            format!("GETRANGE {k} 0 1"),
            format!("GET {k}"),
            format!("SET {k}:s hello EX 100"),
            format!("GETEX {k}:s PERSIST"),
            format!("TTL {k}:s"),
            format!("GETDEL {k}:s"),
            format!("HSET {k}:h a 1 b 2"),
            format!("HINCRBY {k}:h a 5"),
            format!("HGETALL {k}:h"),
            format!("HMGET {k}:h a b c"),
            format!("RPUSH {k}:l a b c"),
            format!("LPOP {k}:l"),
            format!("LRANGE {k}:l 0 -1"),
            format!("SADD {k}:set x y z"),
            format!("SISMEMBER {k}:set y"),
            format!("SCARD {k}:set"),
            format!("ZADD {k}:z 1 one 2 two 3 three"),
            format!("ZRANGE {k}:z 0 -1 WITHSCORES"),
            format!("ZINCRBY {k}:z 2 one"),
            format!("ZPOPMIN {k}:z"),
            format!("EXPIRE {k}:z 100"),
            format!("TYPE {k}:z"),
            format!("GET {k}:h"),
        ] {
            script.push(line(&cmd));
        }
        // EVAL with one key, on that key's master.
        script.push(vec![
            "EVAL".into(),
            "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])".into(),
            "1".into(),
            format!("{k}:eval"),
            format!("e{i}"),
        ]);
        script.push(line(&format!("GET {k}:eval")));
    }
    // MSETNX with a hash tag: one slot, so it is served.
    script.push(line("MSETNX {t}:a 1 {t}:b 2"));
    script.push(line("MGET {t}:a {t}:b"));
    script.push(line("DBSIZE"));
    same_replies(&mut m, &mut p, &script);

    // The keys really are on every master.
    let with_keys = nodes
        .masters()
        .into_iter()
        .filter(|&i| nodes.cmd(i, &[b"DBSIZE"]).as_int().unwrap_or(0) > 0)
        .count();
    assert_eq!(with_keys, 3, "keys on every master");

    // One item, two protocols.
    let mut mc = memshift.client();
    let reply = mc
        .request_str(b"set xp:mc 77 0 5\r\nhello\r\n")
        .expect("memcached set");
    assert_eq!(reply, "STORED\r\n");
    let want = Resp::Bulk(Some(b"hello".to_vec()));
    let hits = || metric(admin_port, "memshift_near_cache_hits_total");
    let before = hits();
    for _ in 0..3 {
        assert_eq!(m.cmd(&[b"GET", b"xp:mc"]).expect("GET"), want);
    }
    if !extra_tables.is_empty() {
        // Admitted on the first read: the next ones are near-cache hits
        // (once the masters' tracking connections are up).
        wait_until(
            Duration::from_secs(30),
            Duration::from_millis(5),
            "a near-cache hit",
            || {
                assert_eq!(m.cmd(&[b"GET", b"xp:mc"]).expect("GET"), want);
                (hits() > before).then_some(())
            },
        );
    }
    assert_eq!(
        m.cmd(&[b"SET", b"xp:resp", b"world"]).expect("SET"),
        Resp::Simple("OK".into())
    );
    assert_eq!(
        mc.request_str(b"get xp:resp xp:mc\r\n").expect("get"),
        "VALUE xp:resp 0 5\r\nworld\r\nVALUE xp:mc 77 5\r\nhello\r\nEND\r\n"
    );

    // Refused: the error names why; the connection stays usable.
    let refused = |m: &mut RedisClient, args: &[&[u8]]| match m.cmd(args).expect("reply") {
        Resp::Error(e) => assert!(e.contains("not supported by memshift"), "{args:?}: {e}"),
        other => panic!("{args:?} answered {other:?}"),
    };
    let mut msetnx: Vec<&[u8]> = vec![b"MSETNX"];
    for k in &keys {
        msetnx.push(k.as_bytes());
        msetnx.push(b"1");
    }
    refused(&mut m, &msetnx);
    refused(&mut m, &[b"KEYS", b"*"]);
    refused(&mut m, &[b"EVAL", b"return 1", b"2", b"ck:1", b"ck:2"]);
    refused(&mut m, &[b"CLUSTER", b"NODES"]);
    assert_eq!(
        m.cmd(&[b"PING"]).expect("PING"),
        Resp::Simple("PONG".into())
    );
}

#[test]
fn resp_over_redis_cluster_matches_plain_redis() {
    resp_over_cluster("resp_over_redis_cluster_matches_plain_redis", "");
}

#[test]
fn resp_over_redis_cluster_with_near_cache_matches_plain_redis() {
    resp_over_cluster(
        "resp_over_redis_cluster_with_near_cache_matches_plain_redis",
        "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 1\n",
    );
}

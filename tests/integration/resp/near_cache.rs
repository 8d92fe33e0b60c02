//! RESP GET/MGET through the near cache (`[near_cache] enabled = true`),
//! real processes: two memshift processes A and B over the same two Redis
//! shards, both with the near cache on and entries living up to a minute,
//! so a missed invalidation shows as a stale read for far longer than any
//! poll here waits.
//!
//! - RESP GET through B is answered by the near cache (its hit counter
//!   rises) with the item's data; a raw Redis string reads as itself and is
//!   never cached;
//! - writes through A's RESP port, A's memcached port and redis-cli on the
//!   shard itself are seen by B's RESP GET within a bounded delay;
//! - every RESP write family through B (SET variants, MSET, DEL, UNLINK,
//!   EXPIRE, INCR, APPEND, SETRANGE, GETDEL, GETEX, EVAL, FLUSHDB) is read
//!   back at once by the next GET on B (read-your-writes, no polling);
//! - MGET answers hits, admitted misses, plain misses, raw strings and
//!   other types in request order;
//! - an item set through memcached keeps its flags and TTL after RESP reads
//!   cached it.

use std::time::{Duration, Instant};

use memshift_tests::ops_support::{metric, poll_until, wait_until};
use memshift_tests::resp_proxy::start_resp_memshift;
use memshift_tests::{escape, require_tools, Memshift, RedisClient, RedisServer, Resp};

/// How long an invalidation may take to reach B on a loaded 2-core box.
const DELIVERY: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(2);
const HITS: &str = "memshift_near_cache_hits_total";

struct Pair {
    // Field order = drop order: the proxies go first.
    a: Memshift,
    a_resp: u16,
    b: Memshift,
    b_resp: u16,
    b_admin: u16,
    shards: Vec<RedisServer>,
}

/// A and B over two fresh shards; keys are admitted on their second read.
fn start() -> Pair {
    let shards: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
    let options = |o: &mut memshift_tests::ClusterOptions| {
        o.shards = 2;
        o.timeout_ms = 2000;
        o.server_extra.push_str("allow_flush_all = true\n");
        o.extra_tables =
            "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 2\n".into();
    };
    let (a, a_resp, _) = start_resp_memshift(&addrs, options);
    let (b, b_resp, b_admin) = start_resp_memshift(&addrs, options);
    let pair = Pair {
        a,
        a_resp,
        b,
        b_resp,
        b_admin,
        shards,
    };
    // Both proxies' invalidation connections (RESP3 clients) on each shard.
    for s in &pair.shards {
        s.wait_tracking_clients(2);
    }
    pair
}

fn resp(port: u16) -> RedisClient {
    RedisClient::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(30)).expect("connect")
}

fn cmd(c: &mut RedisClient, args: &[&str]) -> Resp {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.cmd(&args).expect("RESP command")
}

fn bulk(v: &str) -> Resp {
    Resp::Bulk(Some(v.as_bytes().to_vec()))
}

fn ok() -> Resp {
    Resp::Simple("OK".into())
}

impl Pair {
    /// The shard holding `key`.
    fn shard_of(&self, key: &str) -> &RedisServer {
        wait_until(DELIVERY, POLL, "the key in Redis", || {
            self.shards
                .iter()
                .find(|s| s.cmd(&[b"EXISTS", key.as_bytes()]).as_int() == Some(1))
        })
    }

    /// RESP GET through B until one is a near-cache hit answering `want`.
    fn cache_in_b(&self, c: &mut RedisClient, key: &str, want: &str) {
        wait_until(DELIVERY, POLL, "a near-cache hit in B", || {
            let before = metric(self.b_admin, HITS);
            assert_eq!(cmd(c, &["GET", key]), bulk(want), "{key} through B");
            (metric(self.b_admin, HITS) > before).then_some(())
        });
    }
}

/// Poll B's RESP GET until `key` reads `want`; the time it took.
fn seen_by(c: &mut RedisClient, key: &str, want: &Resp) -> Duration {
    let started = Instant::now();
    let mut last = Resp::Bulk(None);
    let seen = poll_until(DELIVERY, POLL, || {
        last = cmd(c, &["GET", key]);
        (last == *want).then_some(())
    });
    assert!(
        seen.is_some(),
        "{key}: B still reads {last:?} {DELIVERY:?} after the write of {want:?}"
    );
    started.elapsed()
}

#[test]
fn resp_near_cache_serves_get_and_sees_writes_from_everywhere() {
    if !require_tools("resp_near_cache_serves_get", &["redis-server"]) {
        return;
    }
    let pair = start();
    let (mut a, mut b) = (resp(pair.a_resp), resp(pair.b_resp));
    let mut a_mc = pair.a.client();
    let mut delays = Vec::new();
    for round in 0..10 {
        let key = format!("rnc:{round}");
        let v = |what: &str| format!("{what}-{round}");
        // Through A's RESP port.
        assert_eq!(cmd(&mut a, &["SET", &key, &v("one")]), ok());
        pair.cache_in_b(&mut b, &key, &v("one"));
        assert_eq!(cmd(&mut a, &["SET", &key, &v("two")]), ok());
        delays.push(seen_by(&mut b, &key, &bulk(&v("two"))));

        // Through A's memcached port.
        pair.cache_in_b(&mut b, &key, &v("two"));
        a_mc.set(&key, v("three").as_bytes())
            .expect("memcached set");
        delays.push(seen_by(&mut b, &key, &bulk(&v("three"))));

        // redis-cli on the shard itself: a raw string (no memshift header)
        // reads as itself and is never a hit.
        pair.cache_in_b(&mut b, &key, &v("three"));
        let shard = pair.shard_of(&key);
        let raw = v("raw");
        assert_eq!(
            shard.cmd(&[b"SET", key.as_bytes(), raw.as_bytes()]),
            Resp::Simple("OK".into())
        );
        delays.push(seen_by(&mut b, &key, &bulk(&raw)));
        let hits = metric(pair.b_admin, HITS);
        for _ in 0..5 {
            assert_eq!(cmd(&mut b, &["GET", &key]), bulk(&raw));
        }
        assert_eq!(metric(pair.b_admin, HITS), hits, "a raw string was cached");
        // A raw DEL.
        assert_eq!(cmd(&mut a, &["SET", &key, &v("four")]), ok());
        pair.cache_in_b(&mut b, &key, &v("four"));
        assert_eq!(shard.cmd(&[b"DEL", key.as_bytes()]).as_int(), Some(1));
        delays.push(seen_by(&mut b, &key, &Resp::Bulk(None)));
    }
    delays.sort();
    println!(
        "RESP near cache: {} writes seen through B, delay p50 {:?} max {:?}",
        delays.len(),
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
}

/// `key` cached in B, `write` through B, then B's next reads answer `want`
/// at once.
fn write_then_read(pair: &Pair, b: &mut RedisClient, key: &str, write: &[&str], want: &Resp) {
    assert_eq!(cmd(b, &["SET", key, "cached"]), ok());
    pair.cache_in_b(b, key, "cached");
    let reply = cmd(b, write);
    assert!(
        !matches!(reply, Resp::Error(_)),
        "{write:?} answered {reply:?}"
    );
    for _ in 0..2 {
        assert_eq!(&cmd(b, &["GET", key]), want, "GET {key} after {write:?}");
    }
}

#[test]
fn resp_near_cache_reads_its_own_writes_of_every_family() {
    if !require_tools("resp_near_cache_reads_its_own_writes", &["redis-server"]) {
        return;
    }
    let pair = start();
    let mut b = resp(pair.b_resp);
    for round in 0..3 {
        let k = |n: &str| format!("ryw:{n}:{round}");
        let key = k("set");
        let writes: Vec<(String, Vec<String>, Resp)> = vec![
            (
                key.clone(),
                vec!["SET".into(), key.clone(), "new".into()],
                bulk("new"),
            ),
            (
                k("setget"),
                vec!["SET".into(), k("setget"), "new".into(), "GET".into()],
                bulk("new"),
            ),
            (
                k("setex"),
                vec!["SETEX".into(), k("setex"), "100".into(), "new".into()],
                bulk("new"),
            ),
            (
                k("psetex"),
                vec!["PSETEX".into(), k("psetex"), "100000".into(), "new".into()],
                bulk("new"),
            ),
            (
                k("getset"),
                vec!["GETSET".into(), k("getset"), "new".into()],
                bulk("new"),
            ),
            (
                k("mset"),
                vec![
                    "MSET".into(),
                    k("other"),
                    "x".into(),
                    k("mset"),
                    "new".into(),
                ],
                bulk("new"),
            ),
            (
                k("del"),
                vec!["DEL".into(), k("other"), k("del")],
                Resp::Bulk(None),
            ),
            (
                k("unlink"),
                vec!["UNLINK".into(), k("unlink")],
                Resp::Bulk(None),
            ),
            (
                k("getdel"),
                vec!["GETDEL".into(), k("getdel")],
                Resp::Bulk(None),
            ),
            (
                k("expire"),
                vec!["PEXPIRE".into(), k("expire"), "1".into()],
                Resp::Bulk(None),
            ),
            (
                k("getex"),
                vec!["GETEX".into(), k("getex"), "PX".into(), "1".into()],
                Resp::Bulk(None),
            ),
            (
                k("append"),
                vec!["APPEND".into(), k("append"), "+".into()],
                bulk("cached+"),
            ),
            (
                k("setrange"),
                vec!["SETRANGE".into(), k("setrange"), "0".into(), "X".into()],
                bulk("Xached"),
            ),
            (
                k("eval"),
                vec![
                    "EVAL".into(),
                    "return redis.call('SET', KEYS[1], ARGV[1])".into(),
                    "1".into(),
                    k("eval"),
                    "raw".into(),
                ],
                bulk("raw"),
            ),
        ];
        for (key, write, want) in &writes {
            let write: Vec<&str> = write.iter().map(String::as_str).collect();
            if write[0] == "PEXPIRE" || write[0] == "GETEX" {
                // Expired 1 ms later: GET may still see it for that long.
                assert_eq!(cmd(&mut b, &["SET", key, "cached"]), ok());
                pair.cache_in_b(&mut b, key, "cached");
                cmd(&mut b, &write);
                std::thread::sleep(Duration::from_millis(5));
                for _ in 0..2 {
                    assert_eq!(&cmd(&mut b, &["GET", key]), want, "after {write:?}");
                }
                continue;
            }
            write_then_read(&pair, &mut b, key, &write, want);
        }
        // Counters: the item is a number.
        let key = k("incr");
        assert_eq!(cmd(&mut b, &["SET", &key, "41"]), ok());
        pair.cache_in_b(&mut b, &key, "41");
        assert_eq!(cmd(&mut b, &["INCR", &key]), Resp::Int(42));
        assert_eq!(cmd(&mut b, &["GET", &key]), bulk("42"));
        pair.cache_in_b(&mut b, &key, "42");
        assert_eq!(cmd(&mut b, &["DECRBY", &key, "2"]), Resp::Int(40));
        assert_eq!(cmd(&mut b, &["GET", &key]), bulk("40"));
        // A pipelined write and the read after it.
        pair.cache_in_b(&mut b, &key, "40");
        let got = b
            .pipeline(&[&[b"SET", key.as_bytes(), b"p"], &[b"GET", key.as_bytes()]])
            .expect("pipeline");
        assert_eq!(got, vec![ok(), bulk("p")]);
        // FLUSHDB drops every entry.
        pair.cache_in_b(&mut b, &key, "p");
        assert_eq!(cmd(&mut b, &["FLUSHDB"]), ok());
        assert_eq!(cmd(&mut b, &["GET", &key]), Resp::Bulk(None));
    }
    assert!(metric(pair.b_admin, HITS) > 0.0);
}

#[test]
fn resp_near_cache_mget_answers_every_kind_of_key_in_order() {
    if !require_tools("resp_near_cache_mget", &["redis-server"]) {
        return;
    }
    let pair = start();
    let mut b = resp(pair.b_resp);
    let mut mc = pair.b.client();
    let keys: Vec<String> = (0..12).map(|i| format!("mg:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        match i % 4 {
            0 | 1 => assert_eq!(cmd(&mut b, &["SET", k, &format!("v{i}")]), ok()),
            2 => mc.set(k, format!("v{i}").as_bytes()).expect("mc set"),
            // Another type: MGET answers nil.
            _ => assert_eq!(cmd(&mut b, &["HSET", k, "f", "v"]), Resp::Int(1)),
        }
    }
    // A raw string on the shard itself, and a key nobody set.
    // (Written through memshift first to find its shard.)
    let raw_key = "mg:raw";
    assert_eq!(cmd(&mut b, &["SET", raw_key, "item"]), ok());
    let shard = pair.shard_of(raw_key);
    assert_eq!(shard.cmd(&[b"SET", raw_key.as_bytes(), b"raw"]), ok());
    let mut ask: Vec<&str> = vec!["MGET"];
    ask.extend(keys.iter().map(String::as_str));
    ask.push(raw_key);
    ask.push("mg:missing");
    ask.push(&keys[0]);
    let mut want: Vec<Resp> = (0..12)
        .map(|i| match i % 4 {
            3 => Resp::Bulk(None),
            _ => bulk(&format!("v{i}")),
        })
        .collect();
    want.push(bulk("raw"));
    want.push(Resp::Bulk(None));
    want.push(bulk("v0"));
    let want = Resp::Array(Some(want));
    let hits = metric(pair.b_admin, HITS);
    for round in 0..6 {
        assert_eq!(cmd(&mut b, &ask), want, "MGET round {round}");
    }
    // 9 item keys (+1 repeated): admitted on the 2nd read, hits from the 3rd.
    assert!(
        metric(pair.b_admin, HITS) >= hits + 9.0,
        "MGET keys never hit the near cache"
    );
    // Writes to some keys (raw and through memcached) are seen.
    assert_eq!(cmd(&mut b, &["SET", &keys[1], "w1"]), ok());
    mc.set(&keys[2], b"w2").expect("mc set");
    pair.shard_of(&keys[5])
        .cmd(&[b"SET", keys[5].as_bytes(), b"w5"]);
    let Resp::Array(Some(mut want)) = want else {
        unreachable!()
    };
    want[1] = bulk("w1");
    want[2] = bulk("w2");
    want[5] = bulk("w5");
    let want = Resp::Array(Some(want));
    let mut last = Resp::Bulk(None);
    let seen = poll_until(DELIVERY, POLL, || {
        last = cmd(&mut b, &ask);
        (last == want).then_some(())
    });
    assert!(seen.is_some(), "MGET after writes: {last:?}");
}

#[test]
fn resp_near_cache_keeps_memcached_flags_and_ttl() {
    if !require_tools("resp_near_cache_keeps_flags_and_ttl", &["redis-server"]) {
        return;
    }
    let pair = start();
    let mut b = resp(pair.b_resp);
    let mut mc = pair.b.client();
    let key = "xp:item";
    let reply = mc
        .request_str(format!("set {key} 4242 1000 5\r\nhello\r\n").as_bytes())
        .expect("set");
    assert_eq!(reply, "STORED\r\n");
    pair.cache_in_b(&mut b, key, "hello");
    // memcached reads the same item (flags kept) whether or not the near
    // cache answers.
    for _ in 0..3 {
        let got = mc
            .request(format!("get {key}\r\n").as_bytes())
            .expect("get");
        assert_eq!(
            escape(&got, 100),
            escape(
                format!("VALUE {key} 4242 5\r\nhello\r\nEND\r\n").as_bytes(),
                100
            )
        );
    }
    let ttl = cmd(&mut b, &["TTL", key]).as_int().expect("TTL");
    assert!((900..=1000).contains(&ttl), "TTL {ttl}");
    let line = mc
        .request_str(format!("mg {key} f t\r\n").as_bytes())
        .expect("mg");
    assert!(line.starts_with("HD f4242 t"), "mg: {line}");
    // A RESP read of the cached item did not change it in Redis.
    let shard = pair.shard_of(key);
    let Resp::Bulk(Some(stored)) = shard.cmd(&[b"GET", key.as_bytes()]) else {
        panic!("item gone")
    };
    assert!(stored.ends_with(b"hello") && stored.len() > 5);
}
